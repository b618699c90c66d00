package sandboxer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// racerC is the hostile tool forging its trail: a thread rewrites a path buffer between two
// names while the main thread unlinks through it. Only precious exists (recreated before each
// unlink; d37/harmless never does), so every unlink that works removed precious, whatever the
// entry of the syscall read. It prints how many worked.
const racerC = `#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char buf[32];
static volatile int stop;

/* Each name stays a while (a syscall's length), so that an unlink can start on one and the
 * kernel read the other. */
static void hold(void)
{
	for (int i = 0; i < 300; i++)
		__builtin_ia32_pause();
}

static void *flip(void *arg)
{
	(void)arg;
	while (!stop) {
		memcpy(buf, "d37/harmless", 13);
		__asm__ volatile("" ::: "memory");
		hold();
		memcpy(buf, "precious\0\0\0\0", 13);
		__asm__ volatile("" ::: "memory");
		hold();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = atoi(argv[1]), ok = 0;
	pthread_t t[1];
	mkdir("d37", 0755);
	memcpy(buf, "precious", 9);
	for (int i = 0; i < 1; i++)
		pthread_create(&t[i], NULL, flip, NULL);
	for (int i = 0; i < n; i++) {
		close(open("precious", O_CREAT | O_WRONLY, 0644));
		if (unlink(buf) == 0)
			ok++;
	}
	stop = 1;
	for (int i = 0; i < 1; i++)
		pthread_join(t[i], NULL);
	printf("%d\n", ok);
	return 0;
}
`

// A path rewritten while the kernel used it is caught: the unlinks that removed precious
// while the buffer said something else are flagged path_changed (read again at the syscall's
// exit, the argument was not what its entry read), and the escape-path-race rule raises an
// alert. A rewrite that put the entry's bytes back before the exit is not seen: the test asks
// for the race to be caught, not for every forged event to be.
func TestForgedUnlinkPathsAreCaught(t *testing.T) {
	bermbin.RequireRoot(t)
	ws := bermbin.Workspace(t)
	src := filepath.Join(t.TempDir(), "racer.c")
	if err := os.WriteFile(src, []byte(racerC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-O2", "-static", "-pthread", "-o", filepath.Join(ws, "racer"), src).CombinedOutput(); err != nil {
		t.Fatalf("build racer: %v\n%s", err, out)
	}
	pol := filepath.Join(t.TempDir(), "racer.yaml")
	if err := os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: racer}
spec:
  filesystem:
    exec: ["${WORKSPACE}", /bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The race needs the flipping thread to run while the kernel reads the path: on two busy
	// cores it may not in one round, so rounds go on (five at most) until it was seen. Every
	// round's trail must hold every unlink that worked.
	state := t.TempDir()
	var flagged, alerts int
	for round := 0; round < 5 && (flagged == 0 || alerts == 0); round++ {
		id := "racer-" + strconv.Itoa(round)
		r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--call-id", id, "--workspace", ws, "--policy", pol, "--", "./racer", "20000")
		if r.Exit != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
		}
		removed, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
		if err != nil || removed == 0 {
			t.Fatalf("the racer removed precious %q times: the test shows nothing", r.Stdout)
		}
		var worked, forged, forgedFlagged int
		for _, e := range bermbin.Timeline(t, state, id).Events {
			if e.Alert != nil && e.Alert.RuleID == "escape-path-race" {
				alerts++
			}
			sc := e.Syscall
			if sc == nil || !strings.HasPrefix(sc.Name, "unlink") || sc.Result != 0 {
				continue
			}
			worked++
			if sc.Path != "precious" {
				forged++
			}
			if sc.PathChanged {
				flagged++
				if sc.Path != "precious" {
					forgedFlagged++
				}
			}
		}
		t.Logf("round %d: %d unlinks of precious; in the trail %d that worked, %d naming another path (%d of them flagged), %d flagged in all so far, %d alerts",
			round, removed, worked, forged, forgedFlagged, flagged, alerts)
		if worked != removed {
			t.Errorf("round %d: %d unlinks worked, %d in the trail", round, removed, worked)
		}
	}
	if flagged == 0 {
		t.Errorf("no unlink flagged path_changed in five rounds: the race went unseen")
	}
	if alerts == 0 {
		t.Errorf("no escape-path-race alert")
	}
}
