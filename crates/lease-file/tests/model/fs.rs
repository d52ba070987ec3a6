//! A model file system: names bound to inodes, every operation one atomic step. Windows'
//! rename, which is two steps, is [`Fs::open`] then [`Fs::rename_file`].

use std::fmt;
use std::rc::Rc;

/// An inode number. Freed numbers are reused (lowest first), as real file systems do, which
/// also keeps states that differ only in allocation history equal.
pub(crate) type Ino = u32;

/// The errors the model's operations return.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Errno {
    /// `EEXIST`
    Exist,
    /// `ENOENT` (also: the parent directory is missing)
    NoEnt,
    /// `ENOTEMPTY`
    NotEmpty,
    /// `ENOTDIR`
    NotDir,
    /// `EISDIR`
    IsDir,
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exist => "EEXIST",
            Self::NoEnt => "ENOENT",
            Self::NotEmpty => "ENOTEMPTY",
            Self::NotDir => "ENOTDIR",
            Self::IsDir => "EISDIR",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Node<D> {
    File { data: D, links: u32 },
    Dir,
}

/// A file system of one tree. Paths are `/`-separated and relative to the root, which always
/// exists; a path's parent must exist and be a directory. File contents are whatever the
/// protocol's model stores (`D`), written whole: a file is created with its contents, or
/// replaced by renaming a private, fully written temporary file over it.
///
/// Not modelled: open file descriptors (a directory removed while a process "is in it" simply
/// is gone: every operation resolves its path afresh), partial writes, permissions, mtimes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Fs<D> {
    /// Sorted by name. (Sorted vectors of shared names: the checker clones a file system for
    /// every transition, and this is several times cheaper than `BTreeMap<String, _>`.)
    names: Vec<(Rc<str>, Ino)>,
    /// Sorted by inode number.
    nodes: Vec<(Ino, Node<D>)>,
}

impl<D> Default for Fs<D> {
    fn default() -> Self {
        Self {
            names: Vec::new(),
            nodes: Vec::new(),
        }
    }
}

fn parent(path: &str) -> Option<&str> {
    path.rsplit_once('/').map(|(p, _)| p)
}

impl<D: Clone> Fs<D> {
    fn alloc(&mut self, node: Node<D>) -> Ino {
        // The lowest free number: the first gap in the sorted list.
        let at = self
            .nodes
            .iter()
            .enumerate()
            .position(|(i, (ino, _))| *ino as usize != i + 1)
            .unwrap_or(self.nodes.len());
        let ino = Ino::try_from(at + 1).unwrap_or(Ino::MAX);
        self.nodes.insert(at, (ino, node));
        ino
    }

    fn node(&self, ino: Ino) -> Option<&Node<D>> {
        self.nodes
            .binary_search_by_key(&ino, |(i, _)| *i)
            .ok()
            .map(|at| &self.nodes[at].1)
    }

    fn name(&self, path: &str) -> Result<usize, usize> {
        self.names.binary_search_by(|(n, _)| (**n).cmp(path))
    }

    fn get(&self, path: &str) -> Option<Ino> {
        self.name(path).ok().map(|at| self.names[at].1)
    }

    fn bind(&mut self, path: &str, ino: Ino) {
        match self.name(path) {
            Ok(at) => self.names[at].1 = ino,
            Err(at) => self.names.insert(at, (Rc::from(path), ino)),
        }
    }

    fn unbind(&mut self, path: &str) {
        if let Ok(at) = self.name(path) {
            self.names.remove(at);
        }
    }

    fn check_parent(&self, path: &str) -> Result<(), Errno> {
        match parent(path) {
            None => Ok(()),
            Some(dir) => match self.get(dir).and_then(|i| self.node(i)) {
                Some(Node::Dir) => Ok(()),
                Some(Node::File { .. }) => Err(Errno::NotDir),
                None => Err(Errno::NoEnt),
            },
        }
    }

    fn drop_name(&mut self, ino: Ino) {
        let Ok(at) = self.nodes.binary_search_by_key(&ino, |(i, _)| *i) else {
            return;
        };
        let gone = match &mut self.nodes[at].1 {
            Node::File { links, .. } => {
                *links -= 1;
                *links == 0
            }
            Node::Dir => true,
        };
        if gone {
            self.nodes.remove(at);
        }
    }

    /// `open(O_CREAT|O_EXCL)` plus writing `data`: only one process can create a name.
    pub(crate) fn create_excl(&mut self, path: &str, data: D) -> Result<Ino, Errno> {
        self.check_parent(path)?;
        if self.get(path).is_some() {
            return Err(Errno::Exist);
        }
        let ino = self.alloc(Node::File { data, links: 1 });
        self.bind(path, ino);
        Ok(ino)
    }

    /// `rename(from, to)`: atomically binds `to` to `from`'s inode, replacing a file at `to`.
    pub(crate) fn rename(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        let ino = self.lookup(from)?;
        self.check_parent(to)?;
        if from == to {
            return Ok(());
        }
        if let Some(old) = self.get(to) {
            if matches!(self.node(old), Some(Node::Dir)) {
                return Err(Errno::IsDir);
            }
            self.drop_name(old);
        }
        self.unbind(from);
        self.bind(to, ino);
        Ok(())
    }

    /// Windows' first half of a rename: open `path` by name, for a handle to its file object
    /// (`MoveFileExW`, or std's fallback that opens the source with `DELETE` access). The model
    /// keeps no handle table: the handle is the inode number, which stays valid as long as the
    /// file exists. Callers open only files that are never unlinked (state and chain entries,
    /// which are only ever renamed), so a handle never outlives its file and a freed number is
    /// never reused under one.
    pub(crate) fn open(&self, path: &str) -> Result<Ino, Errno> {
        let ino = self.lookup(path)?;
        match self.node(ino) {
            Some(Node::File { .. }) => Ok(ino),
            Some(Node::Dir) => Err(Errno::IsDir),
            None => Err(Errno::NoEnt),
        }
    }

    /// Windows' second half of a rename: renames the file object `ino` (a handle from
    /// [`Fs::open`]), under whatever name it has *now*, to `to`, with [`Fs::rename`]'s target
    /// semantics (`FileRenameInfoEx` with `REPLACE_IF_EXISTS | POSIX_SEMANTICS`). It succeeds
    /// whenever the file still has a name, whoever renamed it since the open: a rename of a
    /// file, not of a name. `ENOENT` once the file has no name. (A file with several names is
    /// renamed from its first; the models never link the files they open.)
    pub(crate) fn rename_file(&mut self, ino: Ino, to: &str) -> Result<(), Errno> {
        let from = self
            .names
            .iter()
            .find(|(_, i)| *i == ino)
            .map(|(name, _)| Rc::clone(name))
            .ok_or(Errno::NoEnt)?;
        self.rename(&from, to)
    }

    /// A temporary file with `data`, private to its writer, renamed over `path`: one atomic
    /// step, because nobody else can see (or name) the temporary file.
    pub(crate) fn replace(&mut self, path: &str, data: D) -> Result<Ino, Errno> {
        self.check_parent(path)?;
        if let Some(old) = self.get(path) {
            if matches!(self.node(old), Some(Node::Dir)) {
                return Err(Errno::IsDir);
            }
            self.drop_name(old);
        }
        let ino = self.alloc(Node::File { data, links: 1 });
        self.bind(path, ino);
        Ok(ino)
    }

    /// `link(existing, new)`: `new` must not exist.
    pub(crate) fn link(&mut self, existing: &str, new: &str) -> Result<(), Errno> {
        let ino = self.lookup(existing)?;
        self.check_parent(new)?;
        if self.get(new).is_some() {
            return Err(Errno::Exist);
        }
        let at = self
            .nodes
            .binary_search_by_key(&ino, |(i, _)| *i)
            .map_err(|_| Errno::NoEnt)?;
        match &mut self.nodes[at].1 {
            Node::File { links, .. } => *links += 1,
            Node::Dir => return Err(Errno::IsDir),
        }
        self.bind(new, ino);
        Ok(())
    }

    /// `unlink(path)` of a file.
    pub(crate) fn unlink(&mut self, path: &str) -> Result<(), Errno> {
        let ino = self.lookup(path)?;
        if matches!(self.node(ino), Some(Node::Dir)) {
            return Err(Errno::IsDir);
        }
        self.unbind(path);
        self.drop_name(ino);
        Ok(())
    }

    /// `mkdir(path)`.
    pub(crate) fn mkdir(&mut self, path: &str) -> Result<(), Errno> {
        self.check_parent(path)?;
        if self.get(path).is_some() {
            return Err(Errno::Exist);
        }
        let ino = self.alloc(Node::Dir);
        self.bind(path, ino);
        Ok(())
    }

    /// `rmdir(path)` of an empty directory.
    pub(crate) fn rmdir(&mut self, path: &str) -> Result<(), Errno> {
        let ino = self.lookup(path)?;
        if !matches!(self.node(ino), Some(Node::Dir)) {
            return Err(Errno::NotDir);
        }
        if !self.readdir(path)?.is_empty() {
            return Err(Errno::NotEmpty);
        }
        self.unbind(path);
        self.drop_name(ino);
        Ok(())
    }

    /// `lstat(path)`: the inode, if the name exists.
    pub(crate) fn lookup(&self, path: &str) -> Result<Ino, Errno> {
        self.check_parent(path)?;
        self.get(path).ok_or(Errno::NoEnt)
    }

    /// Whether `path` exists.
    pub(crate) fn exists(&self, path: &str) -> bool {
        self.lookup(path).is_ok()
    }

    /// Reads a whole file.
    pub(crate) fn read(&self, path: &str) -> Result<&D, Errno> {
        let ino = self.lookup(path)?;
        match self.node(ino) {
            Some(Node::File { data, .. }) => Ok(data),
            Some(Node::Dir) => Err(Errno::IsDir),
            None => Err(Errno::NoEnt),
        }
    }

    /// The names (last components) in directory `dir` (`""` is the root), as one atomic
    /// snapshot. (A real `readdir` is not atomic against concurrent changes: a model of a
    /// protocol whose correctness depends on it must split it into steps.)
    pub(crate) fn readdir(&self, dir: &str) -> Result<Vec<&str>, Errno> {
        if !dir.is_empty() {
            match self.get(dir).and_then(|i| self.node(i)) {
                Some(Node::Dir) => {}
                Some(Node::File { .. }) => return Err(Errno::NotDir),
                None => return Err(Errno::NoEnt),
            }
        }
        Ok(self
            .names
            .iter()
            .map(|(name, _)| &**name)
            .filter(|name| parent(name).unwrap_or("") == dir)
            .map(|name| name.rsplit('/').next().unwrap_or(name))
            .collect())
    }
}

impl<D: Clone + fmt::Debug> fmt::Display for Fs<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, ino) in &self.names {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            match self.node(*ino) {
                Some(Node::File { data, .. }) => write!(f, "{name} (#{ino}) = {data:?}")?,
                _ => write!(f, "{name}/ (#{ino})")?,
            }
        }
        if first {
            f.write_str("(empty)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_behave_like_posix() {
        let mut fs = Fs::<u8>::default();
        assert_eq!(fs.create_excl("d/x", 1), Err(Errno::NoEnt));
        fs.mkdir("d").unwrap();
        let x = fs.create_excl("d/x", 1).unwrap();
        assert_eq!(fs.create_excl("d/x", 2), Err(Errno::Exist));
        fs.link("d/x", "d/y").unwrap();
        assert_eq!(fs.lookup("d/y"), Ok(x));
        assert_eq!(fs.rmdir("d"), Err(Errno::NotEmpty));
        fs.replace("d/x", 3).unwrap();
        assert_eq!(fs.read("d/x"), Ok(&3));
        assert_eq!(fs.read("d/y"), Ok(&1));
        fs.rename("d/y", "d/x").unwrap();
        assert_eq!(fs.read("d/x"), Ok(&1));
        assert_eq!(fs.readdir("d").unwrap(), vec!["x"]);
        fs.unlink("d/x").unwrap();
        fs.rmdir("d").unwrap();
        assert_eq!(fs.create_excl("d/x", 1), Err(Errno::NoEnt));
        assert_eq!(fs.readdir("").unwrap(), Vec::<&str>::new());
    }

    /// Windows' two-step rename renames the file, not the name: two renames that both opened
    /// `d/a` both succeed, the second moving the file from the first one's target.
    #[test]
    fn a_windows_rename_follows_the_file() {
        let mut fs = Fs::<u8>::default();
        fs.mkdir("d").unwrap();
        fs.create_excl("d/a", 1).unwrap();
        let first = fs.open("d/a").unwrap();
        let second = fs.open("d/a").unwrap();
        fs.rename_file(first, "d/b").unwrap();
        assert_eq!(fs.open("d/a"), Err(Errno::NoEnt));
        fs.rename_file(second, "d/c").unwrap();
        assert_eq!(fs.readdir("d").unwrap(), vec!["c"]);
        fs.unlink("d/c").unwrap();
        assert_eq!(fs.rename_file(first, "d/e"), Err(Errno::NoEnt));
    }
}
