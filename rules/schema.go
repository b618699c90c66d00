package rules

import (
	"path"
	"reflect"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/secrets"
)

// The CEL view of an event. Each variable is an object type whose fields are read straight
// from the event by a getter: no reflection and no copy of the event per evaluation. A part
// that the event does not have (file on an exec event) reads as its zero value.

type field struct {
	name string
	typ  *types.Type
	get  func(any) ref.Val
}

type objType struct {
	name   string
	typ    *types.Type
	fields map[string]*types.FieldType
	names  []string
}

func newObjType(name string, fs ...field) *objType {
	o := &objType{name: name, typ: types.NewObjectType(name), fields: map[string]*types.FieldType{}}
	for _, f := range fs {
		get := f.get
		o.fields[f.name] = &types.FieldType{
			Type:    f.typ,
			IsSet:   func(any) bool { return true },
			GetFrom: func(v any) (any, error) { return get(v), nil },
		}
		o.names = append(o.names, f.name)
	}
	return o
}

func str(f func(any) string) func(any) ref.Val {
	return func(v any) ref.Val { return types.String(f(v)) }
}
func num(f func(any) int64) func(any) ref.Val { return func(v any) ref.Val { return types.Int(f(v)) } }
func boolean(f func(any) bool) func(any) ref.Val {
	return func(v any) ref.Val { return types.Bool(f(v)) }
}

func evt(v any) *event.Event { return v.(*event.Event) }

var (
	zeroExec    event.Exec
	zeroFork    event.Fork
	zeroExit    event.Exit
	zeroOpen    event.Open
	zeroConnect event.Connect
	zeroSyscall event.Syscall
	zeroDenial  event.Denial
	zeroLimit   event.Limit
	zeroDrop    event.Drop
	zeroDNS     event.DNS
)

const (
	oWronly = 0x1
	oRdwr   = 0x2
	oCreat  = 0x40
	oTrunc  = 0x200
	oAppend = 0x400
)

// variables maps each CEL variable to its object type and to the event kind whose part it
// reads (empty for the parts every event has).
var variables = []struct {
	name string
	kind event.Kind
	obj  *objType
}{
	{"call", "", newObjType("berm.Call",
		field{"id", types.StringType, str(func(v any) string { return evt(v).CallID })},
		field{"tool", types.StringType, str(func(v any) string { return evt(v).Tool })},
		field{"tenant", types.StringType, str(func(v any) string { return evt(v).Tenant })},
		field{"seq", types.IntType, num(func(v any) int64 { return int64(evt(v).Seq) })},
	)},
	{"proc", "", newObjType("berm.Process",
		field{"pid", types.IntType, num(func(v any) int64 { return int64(evt(v).PID) })},
		field{"tid", types.IntType, num(func(v any) int64 { return int64(evt(v).TID) })},
		field{"ppid", types.IntType, num(func(v any) int64 { return int64(evt(v).PPID) })},
		field{"uid", types.IntType, num(func(v any) int64 { return int64(evt(v).UID) })},
		field{"comm", types.StringType, str(func(v any) string { return evt(v).Comm })},
		field{"exe", types.StringType, str(func(v any) string { return evt(v).Exe })},
		field{"parent_exe", types.StringType, str(func(v any) string { return evt(v).ParentExe })},
	)},
	{"exec", event.KindExec, newObjType("berm.Exec",
		field{"filename", types.StringType, str(func(v any) string { return v.(*event.Exec).Filename })},
		field{"argv", types.NewListType(types.StringType), func(v any) ref.Val {
			return types.NewStringList(types.DefaultTypeAdapter, v.(*event.Exec).Argv)
		}},
		field{"truncated", types.BoolType, boolean(func(v any) bool { return v.(*event.Exec).Truncated })},
		field{"mode", types.IntType, num(func(v any) int64 { return int64(v.(*event.Exec).Mode) })},
		field{"setuid", types.BoolType, boolean(func(v any) bool { return v.(*event.Exec).Setuid })},
		field{"deleted", types.BoolType, boolean(func(v any) bool { return v.(*event.Exec).Deleted })},
		field{"exe_name", types.StringType, str(func(v any) string { return v.(*event.Exec).ExeName })},
		field{"exe_path", types.StringType, str(func(v any) string { return v.(*event.Exec).ExePath })},
		field{"euid", types.IntType, num(func(v any) int64 { return int64(v.(*event.Exec).EUID) })},
	)},
	{"fork", event.KindFork, newObjType("berm.Fork",
		field{"child_pid", types.IntType, num(func(v any) int64 { return int64(v.(*event.Fork).ChildPID) })},
	)},
	{"exit", event.KindExit, newObjType("berm.Exit",
		field{"code", types.IntType, num(func(v any) int64 { return int64(v.(*event.Exit).Code) })},
		field{"signal", types.IntType, num(func(v any) int64 { return int64(v.(*event.Exit).Signal) })},
	)},
	{"file", event.KindOpen, newObjType("berm.File",
		field{"path", types.StringType, func(v any) ref.Val { return v.(*fileView).pathVal() }},
		field{"dirfd", types.IntType, num(func(v any) int64 { return int64(v.(*fileView).o.Dirfd) })},
		field{"flags", types.IntType, num(func(v any) int64 { return int64(v.(*fileView).o.Flags) })},
		field{"mode", types.IntType, num(func(v any) int64 { return int64(v.(*fileView).o.Mode) })},
		field{"result", types.IntType, num(func(v any) int64 { return v.(*fileView).o.Result })},
		field{"errno", types.StringType, str(func(v any) string { return v.(*fileView).o.Errno })},
		field{"write", types.BoolType, boolean(func(v any) bool { return v.(*fileView).o.Flags&(oWronly|oRdwr) != 0 })},
		field{"create", types.BoolType, boolean(func(v any) bool { return v.(*fileView).o.Flags&oCreat != 0 })},
		field{"trunc", types.BoolType, boolean(func(v any) bool { return v.(*fileView).o.Flags&oTrunc != 0 })},
		field{"append", types.BoolType, boolean(func(v any) bool { return v.(*fileView).o.Flags&oAppend != 0 })},
		// write, create or trunc: one field, as rules on writes test it on every open
		field{"modifies", types.BoolType, boolean(func(v any) bool { return v.(*fileView).o.Flags&(oWronly|oRdwr|oCreat|oTrunc) != 0 })},
	)},
	{"net", event.KindConnect, newObjType("berm.Net",
		field{"family", types.StringType, str(func(v any) string { return v.(*event.Connect).Family })},
		field{"addr", types.StringType, str(func(v any) string { return v.(*event.Connect).Addr })},
		field{"port", types.IntType, num(func(v any) int64 { return int64(v.(*event.Connect).Port) })},
		field{"result", types.IntType, num(func(v any) int64 { return v.(*event.Connect).Result })},
		field{"errno", types.StringType, str(func(v any) string { return v.(*event.Connect).Errno })},
		field{"unresolved", types.BoolType, boolean(func(v any) bool { return v.(*event.Connect).Unresolved })},
	)},
	{"syscall", event.KindSyscall, newObjType("berm.Syscall",
		field{"nr", types.IntType, num(func(v any) int64 { return int64(v.(*event.Syscall).Nr) })},
		field{"name", types.StringType, str(func(v any) string { return v.(*event.Syscall).Name })},
		// Arguments are the raw registers read as signed: kill(-1, ...) compares with -1.
		field{"args", types.NewListType(types.IntType), func(v any) ref.Val {
			a := &v.(*event.Syscall).Args
			return types.NewDynamicList(types.DefaultTypeAdapter, []int64{
				int64(a[0]), int64(a[1]), int64(a[2]), int64(a[3]), int64(a[4]), int64(a[5])})
		}},
		field{"path", types.StringType, str(func(v any) string { return v.(*event.Syscall).Path })},
		field{"path2", types.StringType, str(func(v any) string { return v.(*event.Syscall).Path2 })},
		field{"result", types.IntType, num(func(v any) int64 { return v.(*event.Syscall).Result })},
		field{"errno", types.StringType, str(func(v any) string { return v.(*event.Syscall).Errno })},
		// the path (path2) read at entry differed at exit: rewritten while the kernel used it
		field{"path_changed", types.BoolType, boolean(func(v any) bool { return v.(*event.Syscall).PathChanged })},
		field{"path2_changed", types.BoolType, boolean(func(v any) bool { return v.(*event.Syscall).Path2Changed })},
		// where BPF LSM saw the object: the path as the tool's memory said it, and whether it
		// named another entry than the kernel acted on (path is then the kernel's)
		field{"tool_path", types.StringType, str(func(v any) string { return v.(*event.Syscall).ToolPath })},
		field{"tool_path2", types.StringType, str(func(v any) string { return v.(*event.Syscall).ToolPath2 })},
		field{"path_forged", types.BoolType, boolean(func(v any) bool { return v.(*event.Syscall).PathForged })},
		field{"path2_forged", types.BoolType, boolean(func(v any) bool { return v.(*event.Syscall).Path2Forged })},
	)},
	{"denial", event.KindDenial, newObjType("berm.Denial",
		field{"layer", types.StringType, str(func(v any) string { return v.(*event.Denial).Layer })},
		field{"surface", types.StringType, str(func(v any) string { return v.(*event.Denial).Surface })},
		field{"rule", types.StringType, str(func(v any) string { return v.(*event.Denial).Rule })},
		field{"object", types.StringType, str(func(v any) string { return v.(*event.Denial).Object })},
		field{"audit", types.BoolType, boolean(func(v any) bool { return v.(*event.Denial).Audit })},
	)},
	{"limit", event.KindLimit, newObjType("berm.Limit",
		field{"resource", types.StringType, str(func(v any) string { return v.(*event.Limit).Resource })},
		field{"limit", types.IntType, num(func(v any) int64 { return v.(*event.Limit).Limit })},
		field{"detail", types.StringType, str(func(v any) string { return v.(*event.Limit).Detail })},
	)},
	{"dns", event.KindDNS, newObjType("berm.DNS",
		field{"name", types.StringType, str(func(v any) string { return v.(*event.DNS).Name })},
		field{"type", types.StringType, str(func(v any) string { return v.(*event.DNS).Type })},
		field{"rcode", types.StringType, str(func(v any) string { return v.(*event.DNS).Rcode })},
		field{"verdict", types.StringType, str(func(v any) string { return v.(*event.DNS).Verdict })},
		field{"rule", types.StringType, str(func(v any) string { return v.(*event.DNS).Rule })},
		field{"answers", types.NewListType(types.StringType), func(v any) ref.Val {
			return types.NewStringList(types.DefaultTypeAdapter, v.(*event.DNS).Answers)
		}},
		field{"transport", types.StringType, str(func(v any) string { return v.(*event.DNS).Transport })},
		field{"internal", types.NewListType(types.StringType), func(v any) ref.Val {
			return types.NewStringList(types.DefaultTypeAdapter, v.(*event.DNS).Internal)
		}},
	)},
	{"drop", event.KindDrop, newObjType("berm.Drop",
		field{"kernel", types.IntType, num(func(v any) int64 { return int64(v.(*event.Drop).Kernel) })},
		field{"user", types.IntType, num(func(v any) int64 { return int64(v.(*event.Drop).User) })},
	)},
}

// kindOfVar is the event kind a variable's part belongs to.
var kindOfVar = func() map[string]event.Kind {
	m := map[string]event.Kind{}
	for _, v := range variables {
		if v.kind != "" {
			m[v.name] = v.kind
		}
	}
	return m
}()

// activation resolves the variables of one event. The engine reuses one per evaluation.
type activation struct {
	ev *event.Event
	fv fileView // the open part of ev, with its path boxed once for every rule that reads it
}

// fileView is what the file variable resolves to: most rules read file.path, on the
// commonest event kind, and a CEL string made once per event saves an allocation per read.
type fileView struct {
	o    *event.Open
	path ref.Val
}

func (f *fileView) pathVal() ref.Val {
	if f.path == nil {
		f.path = types.String(f.o.Path)
	}
	return f.path
}

// kindVals are the kinds as CEL strings, made once.
var kindVals = func() map[event.Kind]ref.Val {
	m := map[event.Kind]ref.Val{}
	for _, k := range event.Kinds {
		m[k] = types.String(k)
	}
	return m
}()

func (a *activation) Parent() interpreter.Activation { return nil }

func (a *activation) ResolveName(name string) (any, bool) {
	ev := a.ev
	switch name {
	case "call", "proc":
		return ev, true
	case "kind":
		if v, ok := kindVals[ev.Kind]; ok {
			return v, true
		}
		return types.String(ev.Kind), true
	case "exec":
		if ev.Exec != nil {
			return ev.Exec, true
		}
		return &zeroExec, true
	case "file":
		o := ev.Open
		if o == nil {
			o = &zeroOpen
		}
		if a.fv.o != o {
			a.fv = fileView{o: o}
		}
		return &a.fv, true
	case "syscall":
		if ev.Syscall != nil {
			return ev.Syscall, true
		}
		return &zeroSyscall, true
	case "net":
		if ev.Connect != nil {
			return ev.Connect, true
		}
		return &zeroConnect, true
	case "fork":
		if ev.Fork != nil {
			return ev.Fork, true
		}
		return &zeroFork, true
	case "exit":
		if ev.Exit != nil {
			return ev.Exit, true
		}
		return &zeroExit, true
	case "denial":
		if ev.Denial != nil {
			return ev.Denial, true
		}
		return &zeroDenial, true
	case "limit":
		if ev.Limit != nil {
			return ev.Limit, true
		}
		return &zeroLimit, true
	case "drop":
		if ev.Drop != nil {
			return ev.Drop, true
		}
		return &zeroDrop, true
	case "dns":
		if ev.DNS != nil {
			return ev.DNS, true
		}
		return &zeroDNS, true
	}
	return nil, false
}

// provider declares the object types to the checker and gives the interpreter the getters.
type provider struct {
	*types.Registry
	objs map[string]*objType
}

func newProvider() *provider {
	reg, _ := types.NewRegistry()
	p := &provider{Registry: reg, objs: map[string]*objType{}}
	for _, v := range variables {
		p.objs[v.obj.name] = v.obj
	}
	return p
}

func (p *provider) FindStructType(name string) (*types.Type, bool) {
	if o, ok := p.objs[name]; ok {
		return types.NewTypeTypeWithParam(o.typ), true
	}
	return p.Registry.FindStructType(name)
}

func (p *provider) FindStructFieldNames(name string) ([]string, bool) {
	if o, ok := p.objs[name]; ok {
		return o.names, true
	}
	return p.Registry.FindStructFieldNames(name)
}

func (p *provider) FindStructFieldType(name, fieldName string) (*types.FieldType, bool) {
	if o, ok := p.objs[name]; ok {
		ft, ok := o.fields[fieldName]
		return ft, ok
	}
	return p.Registry.FindStructFieldType(name, fieldName)
}

// NativeToValue wraps a part of an event used as a whole value (rare: `file` alone).
func (p *provider) NativeToValue(v any) ref.Val {
	var o *objType
	switch v.(type) {
	case *event.Event:
		o = p.objs["berm.Process"]
	case *event.Exec:
		o = p.objs["berm.Exec"]
	case *event.Fork:
		o = p.objs["berm.Fork"]
	case *event.Exit:
		o = p.objs["berm.Exit"]
	case *event.Open:
		o = p.objs["berm.File"]
	case *event.Connect:
		o = p.objs["berm.Net"]
	case *event.Syscall:
		o = p.objs["berm.Syscall"]
	case *event.Denial:
		o = p.objs["berm.Denial"]
	case *event.Limit:
		o = p.objs["berm.Limit"]
	case *event.Drop:
		o = p.objs["berm.Drop"]
	case *event.DNS:
		o = p.objs["berm.DNS"]
	default:
		return p.Registry.NativeToValue(v)
	}
	return &objVal{obj: o, v: v}
}

type objVal struct {
	obj *objType
	v   any
}

func (o *objVal) ConvertToNative(reflect.Type) (any, error) { return o.v, nil }
func (o *objVal) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return o.obj.typ
	}
	return types.NewErr("type conversion error from %s to %s", o.obj.name, t)
}
func (o *objVal) Equal(other ref.Val) ref.Val {
	ov, ok := other.(*objVal)
	return types.Bool(ok && ov.v == o.v)
}
func (o *objVal) Type() ref.Type { return o.obj.typ }
func (o *objVal) Value() any     { return o.v }
func (o *objVal) Get(index ref.Val) ref.Val {
	name, ok := index.(types.String)
	if !ok {
		return types.NewErr("no such key: %v", index)
	}
	ft, ok := o.obj.fields[string(name)]
	if !ok {
		return types.NewErr("no such field: %s", name)
	}
	v, _ := ft.GetFrom(o.v)
	return v.(ref.Val)
}

var _ traits.Indexer = (*objVal)(nil)

// envOptions are the declarations every rule expression is checked against.
func envOptions() []cel.EnvOption {
	p := newProvider()
	opts := []cel.EnvOption{
		cel.CustomTypeProvider(p),
		cel.CustomTypeAdapter(p),
		ext.Strings(),
		ext.Bindings(),
		ext.Network(),
		cel.Variable("kind", cel.StringType),
		cel.Function("basename",
			cel.Overload("basename_string", []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val { return types.String(path.Base(string(v.(types.String)))) }))),
		cel.Function("dirname",
			cel.Overload("dirname_string", []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val { return types.String(path.Dir(string(v.(types.String)))) }))),
		cel.Function("hasBits",
			cel.Overload("hasBits_int_int", []*cel.Type{cel.IntType, cel.IntType}, cel.BoolType,
				cel.BinaryBinding(func(x, m ref.Val) ref.Val {
					mask := int64(m.(types.Int))
					return types.Bool(int64(x.(types.Int))&mask == mask)
				}))),
		// Syscall arguments declared int in C arrive zero-extended: sint32 reads them signed.
		cel.Function("sint32",
			cel.Overload("sint32_int", []*cel.Type{cel.IntType}, cel.IntType,
				cel.UnaryBinding(func(v ref.Val) ref.Val { return types.Int(int32(uint32(int64(v.(types.Int))))) }))),
		// Shannon entropy in bits per character: encoded payloads score high, words low.
		cel.Function("entropy",
			cel.Overload("entropy_string", []*cel.Type{cel.StringType}, cel.DoubleType,
				cel.UnaryBinding(func(v ref.Val) ref.Val { return types.Double(secrets.Entropy(string(v.(types.String)))) }))),
		// The name's parent: its last two labels (a.b.example.com -> example.com).
		cel.Function("parentDomain",
			cel.Overload("parentDomain_string", []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val { return types.String(parentDomain(string(v.(types.String)))) }))),
		stringListFunc("startsWithAny", strings.HasPrefix),
		stringListFunc("endsWithAny", strings.HasSuffix),
		stringListFunc("containsAny", strings.Contains),
	}
	for _, v := range variables {
		opts = append(opts, cel.Variable(v.name, v.obj.typ))
	}
	return opts
}

// stringListFunc declares `s.name(list)`: true when test(s, item) holds for an item.
func stringListFunc(name string, test func(s, x string) bool) cel.EnvOption {
	return cel.Function(name,
		cel.MemberOverload("string_"+name+"_list", []*cel.Type{cel.StringType, cel.ListType(cel.StringType)}, cel.BoolType,
			cel.BinaryBinding(func(s, l ref.Val) ref.Val {
				str := string(s.(types.String))
				lister := l.(traits.Lister)
				if items, ok := lister.Value().([]string); ok {
					for _, x := range items {
						if test(str, x) {
							return types.True
						}
					}
					return types.False
				}
				n := int64(lister.Size().(types.Int))
				for i := int64(0); i < n; i++ {
					if x, ok := lister.Get(types.Int(i)).(types.String); ok && test(str, string(x)) {
						return types.True
					}
				}
				return types.False
			})))
}

func parentDomain(name string) string {
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	if len(labels) <= 2 {
		return strings.Join(labels, ".")
	}
	return strings.Join(labels[len(labels)-2:], ".")
}
