// Package projected writes files as the kubelet writes a projected volume
// (a ServiceAccount token, a CA bundle), for tests of clients that must
// follow its in-place updates.
package projected

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Volume is a directory the kubelet's atomic writer keeps up to date.
type Volume struct {
	// Dir is the mount point: Dir/NAME is what a pod reads.
	Dir string
	gen int
}

// Write replaces the volume's files as the atomic writer does: a new
// timestamped directory holding them, the ..data symlink swapped to it by
// a rename, each file a symlink through ..data (made once), the old
// directory removed. A reader sees the old set or the new set, never a mix.
func (v *Volume) Write(files map[string]string) error {
	v.gen++
	ts := fmt.Sprintf("..2026_12_01_00_00_%02d.%09d", v.gen%60, v.gen)
	if err := os.Mkdir(filepath.Join(v.Dir, ts), 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(v.Dir, ts, name), []byte(data), 0o600); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(v.Dir, "..data_tmp")); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(v.Dir, "..data_tmp"), filepath.Join(v.Dir, "..data")); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(v.Dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return err
			}
		}
	}
	if old == "" {
		return nil
	}
	return os.RemoveAll(filepath.Join(v.Dir, old))
}
