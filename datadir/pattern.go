package datadir

import (
	"fmt"
	"path"
	"strings"
)

// pattern is a slash-separated path pattern relative to a version
// directory. Each segment is a path.Match pattern; the segment "**" matches
// zero or more segments, so "runtime/**" matches runtime itself and
// everything below it and "**/*.lock" matches a lock file at any depth.
type pattern []string

func compilePatterns(raw []string) ([]pattern, error) {
	ps := make([]pattern, 0, len(raw))
	for _, r := range raw {
		if r == "" || strings.HasPrefix(r, "/") {
			return nil, fmt.Errorf("pattern %q must be a non-empty relative path", r)
		}
		p := pattern(strings.Split(r, "/"))
		for _, seg := range p {
			switch seg {
			case "", ".", "..":
				return nil, fmt.Errorf("pattern %q has an empty, . or .. segment", r)
			case "**":
				continue
			}
			if _, err := path.Match(seg, ""); err != nil {
				return nil, fmt.Errorf("pattern %q: %w", r, err)
			}
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// matchAny reports whether the slash-separated relative path rel matches one
// of ps.
func matchAny(ps []pattern, rel string) bool {
	if len(ps) == 0 {
		return false
	}
	name := strings.Split(rel, "/")
	for _, p := range ps {
		if matchSegments(p, name) {
			return true
		}
	}
	return false
}

func matchSegments(p pattern, name []string) bool {
	for len(p) > 0 {
		if p[0] == "**" {
			p = p[1:]
			if len(p) == 0 {
				return true
			}
			for i := range len(name) + 1 {
				if matchSegments(p, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(p[0], name[0]); !ok {
			return false
		}
		p, name = p[1:], name[1:]
	}
	return len(name) == 0
}
