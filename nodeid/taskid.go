package nodeid

import "strings"

// taskIDPunct lists the characters a task ID may hold besides ASCII letters
// and digits. Task IDs of other tasks reach peers' templates and shell env
// files, so they are restricted to characters no shell, quoted or not,
// treats as syntax; ECS task ARNs (arn:aws:ecs:REGION:ACCOUNT:task/CLUSTER/ID),
// hostnames, UUIDs and Camunda's task IDs need no others.
const taskIDPunct = "-._:/@+=,"

// maxTaskIDLen bounds a task ID (it travels in an HTTP header).
const maxTaskIDLen = 256

// taskIDChar reports whether c may occur in a task ID.
func taskIDChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(taskIDPunct, c) >= 0
}

// safeTaskIDText reports whether s, a task ID read from a lease object, is
// one this tool could have written: 1..256 allowed characters, or such an ID
// behind recreatedPrefix. Anything else came from another writer and is not
// shown to templates or peers.
func safeTaskIDText(s string) bool {
	s = strings.TrimPrefix(s, recreatedPrefix)
	if s == "" || len(s) > maxTaskIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !taskIDChar(s[i]) {
			return false
		}
	}
	return true
}
