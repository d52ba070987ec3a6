"""The chaos run's attacker (docs/chaos.md, *The attacker*): another local user, run as
`nobody` by `cargo xtask chaos`, a member of the shared store it watches (it owns the store
directory). With inotify it races symbolic and hard links to a root-owned sentinel:

* every temporary lock directory (`.lease-init.<hash>.<nonce>`) the moment it appears: renamed
  away and replaced by a hard link to the sentinel (refused by fs.protected_hardlinks=1, counted)
  or a symbolic link to it, one time in two (a creation that goes through now and then keeps
  the keys' other paths in use too), the link removed again a few milliseconds later;
* names not created yet: a key's name the moment its lock directory is pruned (a symbolic link
  for a few milliseconds, then removed: the attacker's own link, never a lock directory), and
  the old CLI's probe names `.lease-probe-<pid>` for the next pids, planted ahead.

It never renames or removes a lock directory or a state entry (root's lock directories are not
writable by it anyway): a store member can deny or release leases by design, and the contract
does not survive deleting their state.

Arguments: STOP SENTINEL STORE... Runs until STOP exists, then prints `key=count` pairs."""

import ctypes
import os
import random
import select
import struct
import sys
import time

stop, sentinel = sys.argv[1:3]
stores = sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
IN_CREATE, IN_MOVED_TO, IN_DELETE = 0x100, 0x80, 0x200
fd = libc.inotify_init1(0o4000 | 0o2000000)  # IN_NONBLOCK | IN_CLOEXEC
watches = {}
for store in stores:
    wd = libc.inotify_add_watch(fd, store.encode(), IN_CREATE | IN_MOVED_TO | IN_DELETE)
    if fd < 0 or wd < 0:
        sys.exit("inotify failed: errno %d" % ctypes.get_errno())
    watches[wd] = store
done = {
    "temp_seen": 0,
    "temp_symlink": 0,
    "temp_hardlink": 0,
    "hardlink_refused": 0,
    "ahead_symlink": 0,
    "probe_symlink": 0,
    "temp_left": 0,
}
planted_probes = []
serial = [0]
random.seed(os.getpid())


def plant(path):
    """A hard link to the sentinel at `path` if the kernel allows it, else a symbolic link."""
    try:
        os.link(sentinel, path)
        done["temp_hardlink"] += 1
        return True
    except OSError:
        done["hardlink_refused"] += 1
    try:
        os.symlink(sentinel, path)
        done["temp_symlink"] += 1
        return True
    except OSError:
        return False


def swap(store, name):
    """Renames the temporary `name` away and plants a link to the sentinel in its place."""
    serial[0] += 1
    moved = os.path.join(store, ".attacker-%d-%d" % (os.getpid(), serial[0]))
    path = os.path.join(store, name)
    if os.path.islink(path):
        return  # the attacker's own link (inotify reports it too)
    try:
        os.rename(path, moved)
    except OSError:
        return
    if plant(path):
        # Removed again soon: a link left there for good would make a pruner take the key's
        # creation for under way forever (a denial of pruning, not what is tested here).
        unplant.append((time.monotonic() + 0.005, path))
    try:
        os.rmdir(moved)  # empty if root had not got to its first entry; root's otherwise
    except OSError:
        done["temp_left"] += 1


def probes():
    """Symbolic links at the probe names of the next pids; the previous batch removed."""
    while planted_probes:
        try:
            os.unlink(planted_probes.pop())
        except OSError:
            pass
    try:
        last = int(open("/proc/sys/kernel/ns_last_pid").read())
    except OSError:
        return
    store = stores[serial[0] % len(stores)]
    for pid in range(last + 1, last + 64):
        path = os.path.join(store, ".lease-probe-%d" % pid)
        try:
            os.symlink(sentinel, path)
            done["probe_symlink"] += 1
            planted_probes.append(path)
        except OSError:
            pass


unplant = []  # (when, path): a link of the attacker's own, removed soon
probes()
next_probes = time.monotonic() + 1.0
while not os.path.exists(stop):
    readable, _, _ = select.select([fd], [], [], 0.005)
    if readable:
        try:
            buf = os.read(fd, 1 << 16)
        except BlockingIOError:
            buf = b""
        i = 0
        while i + 16 <= len(buf):
            wd, mask, _, length = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + length].rstrip(b"\0").decode(errors="replace")
            i += 16 + length
            store = watches.get(wd)
            if store is None or not name:
                continue
            if mask & (IN_CREATE | IN_MOVED_TO) and name.startswith(".lease-init."):
                done["temp_seen"] += 1
                if random.random() < 0.5:
                    swap(store, name)
            elif mask & IN_DELETE and not name.startswith(".") and random.random() < 0.5:
                path = os.path.join(store, name)
                try:
                    os.symlink(sentinel, path)
                    done["ahead_symlink"] += 1
                    unplant.append((time.monotonic() + 0.005, path))
                except OSError:
                    pass
    now = time.monotonic()
    while unplant and unplant[0][0] <= now:
        _, path = unplant.pop(0)
        try:
            if os.path.islink(path):
                os.unlink(path)
        except OSError:
            pass
    if now >= next_probes:
        next_probes = now + 1.0
        probes()
probes_left = list(planted_probes)
planted_probes.clear()
for path in probes_left:
    try:
        os.unlink(path)
    except OSError:
        pass
for _, path in unplant:
    try:
        if os.path.islink(path):
            os.unlink(path)
    except OSError:
        pass
print(" ".join("%s=%d" % kv for kv in sorted(done.items())), flush=True)
