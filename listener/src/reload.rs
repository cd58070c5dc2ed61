//! Something built from files and built again when they change: the
//! serving certificate and the client CA bundle ([`crate::tls`]) are read
//! again at the handshake after their files change, so rotation needs no
//! restart and open connections are untouched, as Kubernetes components
//! do. A replacement that does not load, say a certificate written before
//! its key, keeps the previous one in service.

use std::{
    fmt::Display,
    path::{Path, PathBuf},
    time::SystemTime,
};

use parking_lot::Mutex;
use tracing::{info, warn};

/// What identifies a file's contents without reading it.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    // Follows symlinks: a Kubernetes Secret volume swaps a symlink.
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// A `T` built from `files` and built again when one of them changes
/// (checked on each use, by modification time and length).
pub(crate) struct Reloading<T, E> {
    files: Vec<PathBuf>,
    what: &'static str,
    load: Box<dyn Fn() -> Result<T, E> + Send + Sync>,
    current: Mutex<(Vec<Stamp>, T)>,
}

impl<T: Clone, E: Display> Reloading<T, E> {
    /// Loads it; fails if the files cannot be used now.
    pub(crate) fn new(
        what: &'static str,
        files: Vec<PathBuf>,
        load: impl Fn() -> Result<T, E> + Send + Sync + 'static,
    ) -> Result<Self, E> {
        let stamps = files.iter().map(|f| stamp(f)).collect();
        let loaded = load()?;
        Ok(Reloading {
            files,
            what,
            load: Box::new(load),
            current: Mutex::new((stamps, loaded)),
        })
    }

    /// The current one, built again first if a file changed.
    pub(crate) fn current(&self) -> T {
        let stamps: Vec<Stamp> = self.files.iter().map(|f| stamp(f)).collect();
        let mut current = self.current.lock();
        if current.0 != stamps {
            current.0 = stamps;
            match (self.load)() {
                Ok(loaded) => {
                    info!(files = ?self.files, "{} reloaded", self.what);
                    current.1 = loaded;
                }
                Err(err) => {
                    warn!(error = %err, "{} not reloaded; keeping the previous one", self.what)
                }
            }
        }
        current.1.clone()
    }
}

impl<T, E> std::fmt::Debug for Reloading<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("what", &self.what)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}
