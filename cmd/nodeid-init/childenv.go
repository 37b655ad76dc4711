package main

import (
	"os"
	"strings"
)

// inheritedEnv is the environment the command inherits. Without a data
// directory (no --data-root) an inherited NODE_DATA_DIR is left out: it
// would name a directory this tenure did not prepare, which a stale holder
// may still be writing. With one, nodeEnv's value comes later and wins.
func inheritedEnv(dataDir string) []string {
	env := os.Environ()
	if dataDir != "" {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "NODE_DATA_DIR=") {
			out = append(out, kv)
		}
	}
	return out
}
