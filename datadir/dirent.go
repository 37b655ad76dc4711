package datadir

import "io/fs"

// dirEntry is a name and its type as the directory listing gives it.
type dirEntry struct {
	name string
	typ  fs.FileMode
}

func (e dirEntry) Name() string      { return e.name }
func (e dirEntry) Type() fs.FileMode { return e.typ }
