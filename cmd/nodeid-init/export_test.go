package main

// What the external tests (package main_test) use of the command's
// internals.
var (
	EnvFileText = envFileText
	RealMain    = realMain
)

// SetBeforeStartHook sets the function run calls just before it decides to
// start the command.
func SetBeforeStartHook(f func()) { testHooks.beforeStart = f }
