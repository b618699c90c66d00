// The chart rendered with Helm's own engine (helm.sh/helm/v3, what `helm template` runs) and
// every object it renders decoded strictly into the Kubernetes API types: a field the API does
// not have, or a misspelt one, fails here, not at `kubectl apply`.
package helm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// rendered is what the chart made, by kind.
type rendered struct {
	ds      *appsv1.DaemonSet
	cm      *corev1.ConfigMap
	sa      *corev1.ServiceAccount
	objects int
}

func render(t *testing.T, values string) rendered {
	t.Helper()
	ch, err := loader.Load("berm")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "r", Namespace: "berm-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var out rendered
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range bytes.Split([]byte(files[name]), []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var obj any
			switch meta.Kind {
			case "DaemonSet":
				out.ds = &appsv1.DaemonSet{}
				obj = out.ds
			case "ConfigMap":
				out.cm = &corev1.ConfigMap{}
				obj = out.cm
			case "ServiceAccount":
				out.sa = &corev1.ServiceAccount{}
				obj = out.sa
			default:
				t.Fatalf("%s: a %q the test does not know: decode it strictly too", name, meta.Kind)
			}
			// as the API server reads it: field names matched case-sensitively (encoding/json
			// would take hostPid for hostPID), none unknown, none twice
			js, err := yaml.YAMLToJSONStrict(doc)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			strict, err := kjson.UnmarshalStrict(js, obj)
			if err == nil && len(strict) > 0 {
				err = errors.Join(strict...)
			}
			if err != nil {
				t.Fatalf("%s: not a strict %s: %v\n%s", name, meta.Kind, err, doc)
			}
			out.objects++
		}
	}
	if out.ds == nil || out.sa == nil {
		t.Fatalf("no DaemonSet or ServiceAccount rendered: %v", names)
	}
	return out
}

func container(t *testing.T, ds *appsv1.DaemonSet, name string) *corev1.Container {
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	return nil
}

func hasArg(c *corev1.Container, arg string) bool { return slices.Contains(c.Args, arg) }

// bermdCaps are the capabilities bermd's container gets, each one's reason in README.md.
var bermdCaps = []corev1.Capability{"BPF", "PERFMON", "SYS_ADMIN", "NET_ADMIN", "SYS_RESOURCE", "SYS_PTRACE", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "KILL"}

// hostPaths are the node's paths the pod mounts, each one's reason in README.md.
var hostPaths = []string{"/var/lib/berm", "/run/berm", "/sys/fs/cgroup", "/sys/fs/bpf", "/sys/kernel/tracing"}

const fullValues = `
clickhouse: {dsn: "clickhouse://ch.berm.svc:9000/berm", cluster: berm}
otlp: {endpoint: "otelcol.obs.svc:4317"}
alertWebhook: {url: "http://falcosidekick.obs.svc:2801/", secretName: berm-webhook}
access: |
  tenants:
    build: {run: [ci]}
policies:
  build: |
    apiVersion: berm.dev/v1alpha1
    kind: ToolPolicy
    metadata: {name: build}
`

func TestTheChartRendersStrictKubernetesObjects(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		check        func(t *testing.T, r rendered)
	}{
		{"the defaults: bermd alone, no collector, no ConfigMap", "", func(t *testing.T, r rendered) {
			if r.objects != 2 || r.cm != nil {
				t.Errorf("%d objects (ConfigMap %v), want the DaemonSet and its ServiceAccount", r.objects, r.cm != nil)
			}
			if c := container(t, r.ds, "collector"); c != nil {
				t.Error("a collector with no ClickHouse to ship to")
			}
			b := container(t, r.ds, "bermd")
			for _, arg := range []string{"--otlp-endpoint", "--alert-webhook", "--access"} {
				for _, a := range b.Args {
					if strings.HasPrefix(a, arg) {
						t.Errorf("bermd has %s with none set", a)
					}
				}
			}
			if len(r.ds.Spec.Template.Spec.InitContainers) != 0 {
				t.Error("an init container with no policies to install")
			}
		}},
		{"everything set: collector, OTLP, the webhook's key, access and policies", fullValues, func(t *testing.T, r rendered) {
			b := container(t, r.ds, "bermd")
			for _, arg := range []string{"--otlp-endpoint=otelcol.obs.svc:4317", "--alert-webhook=http://falcosidekick.obs.svc:2801/",
				"--alert-webhook-secret=/etc/berm/alert-webhook/key", "--access=/etc/berm/config/access.yaml", "--node=$(NODE_NAME)"} {
				if !hasArg(b, arg) {
					t.Errorf("bermd's args lack %s: %v", arg, b.Args)
				}
			}
			c := container(t, r.ds, "collector")
			if c == nil {
				t.Fatal("no collector with a ClickHouse DSN")
			}
			if !hasArg(c, "--cluster=berm") || c.Env[0].Value != "clickhouse://ch.berm.svc:9000/berm" {
				t.Errorf("collector args %v env %v", c.Args, c.Env)
			}
			sc := c.SecurityContext
			if len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("the collector is more than a reader of the journal: %+v", sc)
			}
			if r.cm == nil || r.cm.Data["access.yaml"] == "" || !strings.Contains(r.cm.Data["policy-build.yaml"], "kind: ToolPolicy") {
				t.Errorf("ConfigMap %+v", r.cm)
			}
			if ic := r.ds.Spec.Template.Spec.InitContainers; len(ic) != 1 || len(ic[0].SecurityContext.Capabilities.Add) != 0 {
				t.Errorf("the policies' installer: %+v", ic)
			}
		}},
		{"a DSN from a Secret is not in the manifest", `clickhouse: {dsnSecret: ch-dsn}`, func(t *testing.T, r rendered) {
			c := container(t, r.ds, "collector")
			if c == nil || c.Env[0].Value != "" || c.Env[0].ValueFrom.SecretKeyRef.Name != "ch-dsn" {
				t.Errorf("collector env %+v", c)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.values)
			// what every rendering holds: bermd privileged only as far as it must be
			spec := r.ds.Spec.Template.Spec
			if !spec.HostPID || spec.HostNetwork || spec.HostIPC {
				t.Errorf("hostPID %v (want true: callers' pids), hostNetwork %v, hostIPC %v (want false)", spec.HostPID, spec.HostNetwork, spec.HostIPC)
			}
			b := container(t, r.ds, "bermd")
			sc := b.SecurityContext
			if sc.Privileged == nil || *sc.Privileged || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("bermd privileged %v, read-only root %v", sc.Privileged, sc.ReadOnlyRootFilesystem)
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, bermdCaps) {
				t.Errorf("bermd's capabilities drop %v add %v, want ALL then exactly %v (README.md says why each)", sc.Capabilities.Drop, sc.Capabilities.Add, bermdCaps)
			}
			var paths []string
			for _, v := range spec.Volumes {
				if v.HostPath != nil && v.HostPath.Path != "/etc/berm/policies" {
					paths = append(paths, v.HostPath.Path)
				}
			}
			if !slices.Equal(paths, hostPaths) {
				t.Errorf("host paths %v, want exactly %v", paths, hostPaths)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the pod mounts a service account token: berm talks to no API server")
			}
			tc.check(t, r)
		})
	}
}

// README.md names the reason for every capability and host path the chart asks for.
func TestTheReadmeSaysWhyForEachPrivilege(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range bermdCaps {
		if !bytes.Contains(b, []byte(fmt.Sprintf("`CAP_%s`", c))) {
			t.Errorf("README.md does not say why bermd has CAP_%s", c)
		}
	}
	for _, p := range append(hostPaths, "hostPID", "Unconfined") {
		if !bytes.Contains(b, []byte("`"+p+"`")) {
			t.Errorf("README.md does not say why the pod has %s", p)
		}
	}
}
