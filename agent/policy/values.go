package policy

import (
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var sizeRE = regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi|Ti|K|M|G|T)?$`)

var sizeUnits = map[string]int64{
	"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}

// parseSize reads a byte size: a plain number of bytes or one with a Ki/Mi/Gi/Ti (or K/M/G/T)
// suffix, as Kubernetes spells quantities.
func parseSize(s string) (int64, bool) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	unit := sizeUnits[m[2]]
	if err != nil || v <= 0 || v > math.MaxInt64/unit {
		return 0, false
	}
	return v * unit, true
}

func (d *decoder) size(n *yaml.Node, field string, dst *int64) {
	s, ok := d.scalar(n, field, "a size like 512Mi", "!!str", "!!int")
	if !ok {
		return
	}
	v, ok := parseSize(s)
	if !ok {
		d.fail(n, field, "expected a size like 512Mi, got %s", describe(n))
		return
	}
	*dst = v
}

func (d *decoder) count(n *yaml.Node, field string, dst *int64) {
	s, ok := d.scalar(n, field, "a positive whole number", "!!int")
	if !ok {
		return
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		d.fail(n, field, "expected a positive whole number, got %s", describe(n))
		return
	}
	*dst = v
}

// cpus reads a CPU count: 2, 0.5 or 500m (millicpus).
func (d *decoder) cpus(n *yaml.Node, field string, dst *int64) {
	const want = "a CPU count like 1, 0.5 or 500m"
	s, ok := d.scalar(n, field, want, "!!str", "!!int", "!!float")
	if !ok {
		return
	}
	var milli int64
	if m, found := strings.CutSuffix(s, "m"); found {
		v, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			milli = -1
		} else {
			milli = v
		}
	} else {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || v > 1e6 {
			milli = -1
		} else {
			milli = int64(math.Round(v * 1000))
		}
	}
	if milli <= 0 || milli > 1e9 {
		d.fail(n, field, "expected %s, got %s", want, describe(n))
		return
	}
	*dst = milli
}

func (d *decoder) duration(n *yaml.Node, field string, dst *time.Duration) {
	const want = "a duration like 5m or 90s"
	s, ok := d.scalar(n, field, want, "!!str")
	if !ok {
		return
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		d.fail(n, field, "expected %s, got %s", want, describe(n))
		return
	}
	*dst = v
}

// cidr reads a prefix (10.0.0.0/8, 2001:db8::/32) or a single address. Host bits set is an
// error: "10.1.2.3/8" usually means the writer expected something else.
func (d *decoder) cidr(n *yaml.Node, field string, dst *netip.Prefix) {
	const want = "a CIDR like 10.0.0.0/8 or an address"
	s, ok := d.scalar(n, field, want, "!!str")
	if !ok {
		return
	}
	var p netip.Prefix
	var err error
	if strings.Contains(s, "/") {
		p, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(s)
		if err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil || p.Addr().Zone() != "" {
		d.fail(n, field, "expected %s, got %s", want, describe(n))
		return
	}
	if p.Masked() != p {
		d.fail(n, field, "expected a CIDR without host bits (%s), got %s", p.Masked(), describe(n))
		return
	}
	*dst = p
}

// portRange reads 443 or "8000-8100".
func (d *decoder) portRange(n *yaml.Node, field string) (PortRange, bool) {
	const want = "a port (1-65535) or a range like 8000-8100"
	s, ok := d.scalar(n, field, want, "!!int", "!!str")
	if !ok {
		return PortRange{}, false
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || l == 0 || h < l {
		d.fail(n, field, "expected %s, got %s", want, describe(n))
		return PortRange{}, false
	}
	return PortRange{uint16(l), uint16(h)}, true
}

// capabilityNames are the Linux capabilities by number.
var capabilityNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}
