package qemu

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/testutil"
)

// TestLSMInVM runs agent/lsm's TestVM tests and TestNewOnThisKernel (which must load BPF LSM
// there) on Debian's kernel with BPF LSM active: the test passes iff they passed there. Root
// is needed only to download the kernel (later runs use the cache; override its place with
// BERM_TESTENV_CACHE).
func TestLSMInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM (≈ 15 s under TCG): not in -short")
	}
	for _, tool := range []string{"qemu-system-x86_64", "xz", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Unavailable(t, "%s missing (testenv/install-deps.sh installs qemu-system-x86 and busybox-static): %v", tool, err)
		}
	}
	busybox := "/bin/busybox"
	if out, err := exec.Command("file", "-L", busybox).Output(); err != nil || !bytes.Contains(out, []byte("statically linked")) {
		testutil.Unavailable(t, "%s is not busybox-static (testenv/install-deps.sh installs it)", busybox)
	}
	cache := os.Getenv("BERM_TESTENV_CACHE")
	if cache == "" {
		cache = DefaultCache
	}

	start := time.Now()
	kernel, err := kernelFor(t, cache)
	if err != nil {
		testutil.Unavailable(t, "no kernel with BPF LSM for the VM: %v", err)
	}
	t.Logf("kernel %s (%.1fs)", kernel, time.Since(start).Seconds())

	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "test.bin")
	start = time.Now()
	build := exec.Command("go", "test", "-c", "-o", bin, "./agent/lsm")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the static test binary: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	f, err := os.Create(initrd)
	if err != nil {
		t.Fatal(err)
	}
	if err := Initramfs(f, busybox, bin, "^(TestVM|TestNewOnThisKernel$)"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("test binary and initramfs built (%.1fs)", time.Since(start).Seconds())

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start = time.Now()
	log, err := Boot(ctx, kernel, initrd)
	t.Logf("VM booted, ran the tests and powered off (%.1fs)", time.Since(start).Seconds())
	res := Parse(log)
	if res.Output != "" {
		t.Logf("in the VM (%s):\n%s", res.Kernel, res.Output)
	}
	if err != nil || res.Kernel == "" {
		t.Fatalf("VM run: %v\nserial log:\n%s", err, log)
	}
	if !strings.Contains(res.Kernel, "bpf") {
		t.Errorf("BPF LSM is not active in the VM: %s", res.Kernel)
	}
	if err := res.Check("TestVMEnforce", "TestVMAudit", "TestVMKernelViewOfForgedPaths", "TestNewOnThisKernel"); err != nil {
		t.Errorf("agent/lsm in the VM: %v", err)
	}
}

// kernelFor resolves, downloads and extracts the current Debian kernel, or uses one
// extracted before when apt cannot (offline, not root).
func kernelFor(t *testing.T, cache string) (string, error) {
	pkg, err := ResolveImage()
	if err == nil {
		var k string
		if k, err = Kernel(cache, pkg); err == nil {
			return k, nil
		}
	}
	if k, cerr := CachedKernel(cache); cerr == nil {
		t.Logf("using the cached kernel %s: %v", k, err)
		return k, nil
	}
	return "", err
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}
