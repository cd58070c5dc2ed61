//! How LISTs are paged: client-go's pager rules, and what the answers so
//! far said about the watch cache.

/// The page size when paging is on and none was configured (client-go's pager).
const DEFAULT_PAGE_SIZE: u32 = 500;

/// How LISTs are paged: the configured size, or client-go's rules and what
/// the answers so far said about the watch cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Paging {
    /// Every list in pages of this size (configured).
    Fixed(u32),
    /// client-go's default: pages of 500 at RV "" and "0", none at a
    /// specific RV, so that the watch cache serves it.
    WatchCache,
    /// A list at RV "0" came back in pages: the watch cache is off for this
    /// type, so every list is paged.
    NoWatchCache,
}

impl Paging {
    /// The paging a new reflector starts with.
    pub(crate) fn new(page_size: Option<u32>) -> Self {
        page_size.map_or(Paging::WatchCache, Paging::Fixed)
    }

    /// The page size of a list from `from` (0: unpaged).
    pub(crate) fn page_size(self, from: &str) -> u32 {
        match self {
            Paging::Fixed(size) => size,
            Paging::WatchCache if !from.is_empty() && from != "0" => 0,
            Paging::WatchCache | Paging::NoWatchCache => DEFAULT_PAGE_SIZE,
        }
    }

    /// The paging after a list from `from` took `requests`. Only an answer
    /// to RV "0" says the watch cache is off: a list at RV "" is paged by
    /// etcd even when the cache is on, and the cache should still serve
    /// later relists.
    pub(crate) fn after(self, from: &str, requests: u64) -> Self {
        match self {
            Paging::WatchCache if from == "0" && requests > 1 => Paging::NoWatchCache,
            paging => paging,
        }
    }
}
