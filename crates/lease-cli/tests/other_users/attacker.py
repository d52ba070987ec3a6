"""An unprivileged local user racing the lease store (issue 22): run as `nobody` by
tests/other_users.rs. It owns the store directory, watches it with inotify and swaps every path
root touches there for symbolic links to a root-owned sentinel (and tries hard links, which
fs.protected_hardlinks=1 refuses to a user who cannot write the target):

* temporary lock directories (`.<name>.init.<hex>` before issue 22, `.lease-init.<hex>` after),
  half of them, the moment they appear: the old code then chmod-ed the sentinel through the
  link;
* the CLI's writability probe (`.lease-probe-<pid>`, before issue 22), planted ahead for the next
  pids: the old code truncated the sentinel through it;
* lock directories, now and then, for a moment (a symlink to the sentinel's directory);
* the store directory itself, now and then, for a moment (a symlink to the sentinel's directory).

Arguments: STORE SENTINEL SENTINEL_DIR STOP READY. Runs until STOP exists, then prints what it
did as `key=count` pairs."""

import ctypes
import os
import random
import select
import struct
import sys
import time

store, sentinel, sentinel_dir, stop, ready = sys.argv[1:6]
libc = ctypes.CDLL(None, use_errno=True)
IN_CREATE, IN_MOVED_TO = 0x100, 0x80
fd = libc.inotify_init1(0o4000 | 0o2000000)  # IN_NONBLOCK | IN_CLOEXEC
if fd < 0 or libc.inotify_add_watch(fd, store.encode(), IN_CREATE | IN_MOVED_TO) < 0:
    sys.exit("inotify failed: errno %d" % ctypes.get_errno())
parent = os.path.dirname(store)
done = {"temp": 0, "probe": 0, "lockdir": 0, "store": 0, "hardlink_refused": 0}
serial = [0]


def junk():
    serial[0] += 1
    return os.path.join(store, ".junk-%d-%d" % (os.getpid(), serial[0]))


def swap(path, target):
    """Renames `path` away and plants a symlink to `target` in its place; the old name."""
    moved = junk()
    try:
        os.rename(path, moved)
    except OSError:
        return None
    try:
        os.symlink(target, path)
    except OSError:
        pass
    return moved


# The probe: symlinks for the next pids.
try:
    last = int(open("/proc/sys/kernel/ns_last_pid").read())
except OSError:
    last = 0
for pid in range(last + 1, last + 3000):
    try:
        os.symlink(sentinel, os.path.join(store, ".lease-probe-%d" % pid))
        done["probe"] += 1
    except OSError:
        pass
open(ready, "w").close()

restore = []  # (when, path, moved): a lock directory swapped for a moment
next_store_swap = time.monotonic() + 0.05
while not os.path.exists(stop):
    readable, _, _ = select.select([fd], [], [], 0.002)
    if readable:
        try:
            buf = os.read(fd, 1 << 16)
        except BlockingIOError:
            buf = b""
        i = 0
        while i + 16 <= len(buf):
            _, mask, _, length = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + length].rstrip(b"\0").decode(errors="replace")
            i += 16 + length
            path = os.path.join(store, name)
            if name.startswith(".") and "init." in name:
                # Every other one: a creation that succeeds now and then keeps root's renewals,
                # releases and fenced writes under attack too.
                if random.random() < 0.5 and swap(path, sentinel):
                    done["temp"] += 1
            elif not name.startswith(".") and random.random() < 0.03:
                moved = swap(path, sentinel_dir)
                if moved:
                    done["lockdir"] += 1
                    restore.append((time.monotonic() + 0.01, path, moved))
                try:
                    os.link(sentinel, path + ".hl")
                except OSError:
                    done["hardlink_refused"] += 1
    now = time.monotonic()
    while restore and restore[0][0] <= now:
        _, path, moved = restore.pop(0)
        try:
            os.unlink(path)
            os.rename(moved, path)
        except OSError:
            pass
    if now >= next_store_swap:
        next_store_swap = now + 0.05
        moved = store + ".moved"
        try:
            os.rename(store, moved)
            os.symlink(sentinel_dir, store)
            time.sleep(0.003)
            os.unlink(store)
            os.rename(moved, store)
            done["store"] += 1
        except OSError:
            if os.path.exists(moved) and not os.path.isdir(store):
                try:
                    os.unlink(store)
                except OSError:
                    pass
                os.rename(moved, store)
print(" ".join("%s=%d" % kv for kv in sorted(done.items())), flush=True)
