package datadir

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// maxLinks is how many symlinks a resolution follows before it stops, as
// the kernel does (ELOOP after 40).
const maxLinks = 40

// escapes resolves the relative symlink target, held by the entry rel of
// the version directory r, as the kernel would, one component at a time:
// it follows only symlinks that exist, through lstat and readlink in r,
// and reports whether the resolution leaves r ("" if it does not). Where a
// component does not resolve (missing, a path through a regular file) the
// rest is judged lexically: such a link points nowhere now, and if it ever
// resolves, it is within what its text allows. A resolution that needs more
// than maxLinks expansions is a loop the kernel never follows anywhere: it
// stays inside if it did up to there. An error other than those is
// returned: the link cannot be judged.
func escapes(r *os.Root, rel, target string) (string, error) {
	var cur []string // the resolved directory so far: real directories of r
	if d := path.Dir(rel); d != "." {
		cur = strings.Split(d, "/")
	}
	todo := strings.Split(target, "/")
	lexical, links := false, 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "resolves above the data directory", nil
			}
			cur = cur[:len(cur)-1]
			continue
		}
		next := append(cur[:len(cur):len(cur)], c)
		if lexical {
			cur = next
			continue
		}
		p := strings.Join(next, "/")
		fi, err := r.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			lexical, cur = true, next
			continue
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink == 0:
			cur = next
			continue
		}
		if links++; links > maxLinks {
			// A loop: the kernel gives up here (ELOOP) and follows it
			// nowhere, so nothing past this point can escape. Judging
			// the rest lexically would count the ".." of every
			// expansion (l -> l/..) as a step up.
			return "", nil
		}
		t, err := r.Readlink(p)
		if err != nil {
			return "", err
		}
		if t == "" || path.IsAbs(t) {
			return "leads to an absolute link " + p + " -> " + t, nil
		}
		todo = append(strings.Split(t, "/"), todo...)
	}
	return "", nil
}
