// Package qemu boots a stock Debian kernel with BPF LSM active in a qemu VM (TCG) and runs a
// statically built Go test binary there, reporting its result over the serial console. The
// host kernel refuses BPF LSM, so this is where berm's LSM layer is tested for real.
//
// The kernel is Debian's own linux-image package: downloaded with apt-get download and
// extracted with dpkg-deb -x into a cache directory, never installed.
package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

// DefaultCache holds downloaded kernel packages and extracted kernels.
const DefaultCache = "/var/cache/berm-testenv"

// Meta is Debian's meta package that depends on the current kernel image.
const Meta = "linux-image-amd64"

var imageRE = regexp.MustCompile(`Depends: (linux-image-[0-9][^\s]*-amd64)\b`)

// ResolveImage names the kernel image package linux-image-amd64 depends on now
// (linux-image-6.1.0-NN-amd64). Old NN leave the mirror, so it is resolved, not pinned; when
// apt does not know the package yet, the package lists are updated once.
func ResolveImage() (string, error) {
	name, err := resolve()
	if err == nil {
		return name, nil
	}
	if out, uerr := exec.Command("apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
		return "", fmt.Errorf("resolve %s: %w; apt-get update: %v: %s", Meta, err, uerr, bytes.TrimSpace(out))
	}
	return resolve()
}

func resolve() (string, error) {
	out, err := exec.Command("apt-cache", "depends", Meta).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w: %s", Meta, err, bytes.TrimSpace(out))
	}
	m := imageRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("apt-cache depends %s names no kernel image: %s", Meta, bytes.TrimSpace(out))
	}
	return string(m[1]), nil
}

// Kernel returns the uncompressed vmlinux of package pkg, downloading and extracting it into
// cache on first use. Booting the uncompressed ELF (through its PVH entry) saves the
// decompressor's run under TCG: about 2 s to power-off against 6 s for the bzImage.
func Kernel(cache, pkg string) (string, error) {
	dir := filepath.Join(cache, pkg)
	vmlinux := filepath.Join(dir, "vmlinux")
	if _, err := os.Stat(vmlinux); err == nil {
		return vmlinux, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("kernel cache: %w", err)
	}
	debs, _ := filepath.Glob(filepath.Join(cache, pkg+"_*.deb"))
	if len(debs) == 0 {
		cmd := exec.Command("apt-get", "download", "-q", pkg)
		cmd.Dir = cache
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get download %s: %w: %s", pkg, err, bytes.TrimSpace(out))
		}
		if debs, _ = filepath.Glob(filepath.Join(cache, pkg+"_*.deb")); len(debs) == 0 {
			return "", fmt.Errorf("apt-get download %s left no .deb in %s", pkg, cache)
		}
	}
	tmp, err := os.MkdirTemp(cache, ".extract-")
	if err != nil {
		return "", fmt.Errorf("kernel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %w: %s", debs[0], err, bytes.TrimSpace(out))
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(tmp, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		return "", fmt.Errorf("%s holds %d boot/vmlinuz-* files, want 1", debs[0], len(vmlinuz))
	}
	elf, err := ExtractVmlinux(vmlinuz[0])
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kernel cache: %w", err)
	}
	part := vmlinux + ".part"
	if err := os.WriteFile(part, elf, 0o644); err != nil {
		return "", fmt.Errorf("write vmlinux: %w", err)
	}
	if err := os.Rename(part, vmlinux); err != nil {
		return "", fmt.Errorf("write vmlinux: %w", err)
	}
	return vmlinux, nil
}

// CachedKernel returns a vmlinux extracted earlier, for when apt cannot resolve or fetch one.
func CachedKernel(cache string) (string, error) {
	found, _ := filepath.Glob(filepath.Join(cache, "linux-image-*", "vmlinux"))
	if len(found) == 0 {
		return "", fmt.Errorf("no kernel extracted in %s yet", cache)
	}
	return found[len(found)-1], nil
}

var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}

// ExtractVmlinux finds the xz stream inside a bzImage (Debian compresses with xz) and
// decompresses it to the kernel's ELF image.
func ExtractVmlinux(vmlinuz string) ([]byte, error) {
	img, err := os.ReadFile(vmlinuz)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", vmlinuz, err)
	}
	for off := 0; ; {
		i := bytes.Index(img[off:], xzMagic)
		if i < 0 {
			return nil, fmt.Errorf("%s: no xz stream holding an ELF image", vmlinuz)
		}
		off += i
		// --single-stream: the image goes on after the stream (size field, setup data).
		cmd := exec.Command("xz", "-dc", "--single-stream")
		cmd.Stdin = bytes.NewReader(img[off:])
		out, err := cmd.Output()
		if err == nil && bytes.HasPrefix(out, []byte("\x7fELF")) {
			return out, nil
		}
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return nil, fmt.Errorf("run xz: %w", err)
		}
		// the magic bytes by chance, or a stream that is not the kernel: keep looking
		off += len(xzMagic)
	}
}
