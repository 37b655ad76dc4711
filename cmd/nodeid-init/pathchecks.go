package main

import (
	"errors"
	"os"
	"path/filepath"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// checkDataRoot verifies, without writing, that the data root is a writable
// directory, within --fs-timeout (boundedCheck).
func (s *settings) checkDataRoot() error {
	if s.dataRoot == "" {
		return nil
	}
	if err := checkPathText("data root", s.dataRoot); err != nil {
		return err
	}
	return s.boundedCheck("check of "+s.dataRoot, func() error {
		fi, err := os.Stat(s.dataRoot)
		if err != nil {
			return usagef("data root %s: %v", s.dataRoot, errors.Unwrap(err))
		}
		if !fi.IsDir() {
			return usagef("data root %s is not a directory", s.dataRoot)
		}
		if err := unix.Access(s.dataRoot, unix.W_OK|unix.X_OK); err != nil {
			return usagef("data root %s is not writable: %v", s.dataRoot, err)
		}
		return nil
	})
}

// checkPathText refuses control characters (newlines included) and invalid
// UTF-8 in a path that ends up in the env file, a log line or a child's
// environment: a newline there would start a new variable in the env file.
// Spaces, quotes and other printable characters are fine (they are quoted).
func checkPathText(what, path string) error {
	if !utf8.ValidString(path) {
		return usagef("%s %q: not valid UTF-8", what, path)
	}
	for _, r := range path {
		if unicode.IsControl(r) {
			return usagef("%s %q: control characters are not allowed", what, path)
		}
	}
	return nil
}

// checkWritableFile verifies, without writing, that path can be created or
// replaced.
func checkWritableFile(what, path string) error {
	if err := checkPathText(what, path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return usagef("%s %s: directory %s does not exist", what, path, dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return usagef("%s %s: directory %s is not writable", what, path, dir)
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return usagef("%s %s is a directory", what, path)
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return usagef("%s %s is not writable", what, path)
		}
	}
	return nil
}

// outputFile is one file nodeid-init writes, for checkDistinctOutputs.
type outputFile struct{ what, path string }

// checkDistinctOutputs refuses two outputs that are one file: by clean path,
// or, for files that exist, by identity (a symlink or a hard link). Each is
// rewritten by rename, so the last writer would silently replace the other
// (a peers table where the lease file should be, a config file replaced by
// JSON).
func checkDistinctOutputs(outs ...outputFile) error {
	for i, a := range outs {
		if a.path == "" {
			continue
		}
		ai, aerr := os.Stat(a.path)
		for _, b := range outs[i+1:] {
			if b.path == "" {
				continue
			}
			same := filepath.Clean(a.path) == filepath.Clean(b.path)
			if !same && aerr == nil {
				if bi, err := os.Stat(b.path); err == nil {
					same = os.SameFile(ai, bi)
				}
			}
			if same {
				return usagef("%s and %s are the same file (%s): give each its own path", a.what, b.what, b.path)
			}
		}
	}
	return nil
}
