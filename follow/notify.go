package follow

import (
	"errors"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultSweep is how often, with change notification on, every file is
// looked at all the same (see Options.Sweep).
const DefaultSweep = 2 * time.Second

// notifier tells the engine which followed files were written since the
// last cycle, from inotify watches of the directories the globs read, so
// that a cycle reads those files only instead of every file. Anything else
// it sees (a file created, renamed, removed or touched, a lost event) asks
// for a full cycle, which also comes every Options.Sweep: the watches only
// make the engine faster to notice, never the only way it notices.
type notifier struct {
	w       *fsnotify.Watcher
	written map[string]bool // cleaned paths written since the last cycle
	full    bool            // the next cycle must look at every file
}

// notifyQueue is the watcher's channel buffer: between two cycles, 256
// files written 50 times a second leave ~3,200 events.
const notifyQueue = 8192

// startNotify watches the directory of every glob. It returns nil, and the
// engine polls every file every cycle as without it, when a directory is a
// pattern itself or cannot be watched (missing, or the inotify watch limit
// reached: fs.inotify.max_user_watches); why is logged once per reason.
func (e *Engine) startNotify() *notifier {
	if e.opts.NoNotify {
		return nil
	}
	var dirs []string
	for _, g := range e.opts.Globs {
		d := filepath.Clean(filepath.Dir(g))
		if hasMeta(d) {
			e.warnOnce("notify:pattern", "a followed directory is a pattern: polling every file every --poll-interval instead of watching", "dir", d)
			return nil
		}
		dirs = append(dirs, d)
	}
	w, err := fsnotify.NewBufferedWatcher(notifyQueue)
	if err != nil {
		e.warnOnce("notify:new", "file change notification unavailable: polling every file every --poll-interval", "err", err)
		return nil
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			msg := "cannot watch a followed directory: polling every file every --poll-interval until it can"
			if errors.Is(err, syscall.ENOSPC) {
				msg = "inotify watch limit reached (fs.inotify.max_user_watches): polling every file every --poll-interval"
			}
			e.warnOnce("notify:"+d, msg, "dir", d, "err", err)
			return nil
		}
	}
	return &notifier{w: w, written: make(map[string]bool), full: true}
}

func (n *notifier) close() {
	if n != nil {
		n.w.Close()
	}
}

// drain takes what the watcher queued, without blocking.
func (n *notifier) drain() {
	for {
		select {
		case ev, ok := <-n.w.Events:
			if !ok {
				n.full = true
				return
			}
			if ev.Op == fsnotify.Write {
				n.written[filepath.Clean(ev.Name)] = true
			} else {
				n.full = true
			}
		case _, ok := <-n.w.Errors:
			// An overflow (events lost) or a broken watch: look at all.
			n.full = true
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// hasMeta reports whether path holds a filepath.Match metacharacter.
func hasMeta(path string) bool {
	for _, c := range path {
		switch c {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}
