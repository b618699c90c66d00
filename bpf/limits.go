package bpf

// Limits of berm.h that size Go buffers; the contract test checks them against the header.
const (
	BermPathMax = 4096 // BERM_PATH_MAX: longest path a record carries, with its NUL
	BermArgsMax = 8192 // BERM_ARGS_MAX: argv bytes an exec record carries
	// BERM_EXE_PATH_MAX: bytes of the executed file's kernel path an exec record carries
	BermExePathMax = 1024
	// BERM_ENV_MAX: environment bytes an exec_env record carries, for the secret scan
	BermEnvMax    = 8192
	BermXgArgvMax = 4096 // BERM_XG_ARGV_MAX: argv bytes an exec approval holds
)
