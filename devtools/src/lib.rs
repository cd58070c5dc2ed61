//! Checks that `scripts/test` runs on the workspace's own code, with
//! nothing to install: they share the workspace's build of their
//! dependencies.
//!
//! `module-cycles` ([`check`]) proves that no library crate has an import
//! cycle between its modules: it reads each crate's module [`tree`] from
//! its sources, resolves every module's [`imports`] to the modules they
//! name, and fails on any strongly connected component of more than one
//! module ([`cycles`]), naming its modules and a shortest ring through them.
//! `tree` sits below `imports`, and `cycles` on `imports`.

pub mod cycles;
pub mod imports;
pub mod tree;

use std::path::Path;

/// What [`check`] found in one crate.
#[derive(Debug)]
pub struct Report {
    /// The crate's module tree.
    pub tree: tree::Tree,
    /// Each module's imports.
    pub imports: imports::Imports,
    /// Its import cycles, with the first path of each import of a ring.
    pub cycles: Vec<(cycles::Cycle, Vec<String>)>,
}

/// Reads the crate whose root file is `root` and finds its import cycles.
pub fn check(root: &Path) -> Result<Report, tree::TreeError> {
    let tree = tree::Tree::read(root)?;
    let imports = imports::imports(&tree);
    let cycles = cycles::cycles(&imports)
        .into_iter()
        .map(|cycle| {
            let by: Vec<String> = cycle
                .ring
                .iter()
                .zip(cycle.ring.iter().cycle().skip(1))
                .map(|(from, to)| imports[*from][to].clone())
                .collect();
            (cycle, by)
        })
        .collect();
    Ok(Report {
        imports,
        tree,
        cycles,
    })
}

impl Report {
    /// How many (module, module it imports from) pairs there are.
    pub fn count(&self) -> usize {
        self.imports.iter().map(|to| to.len()).sum()
    }

    /// Every import: the importing module, the module imported from, and
    /// the first path that makes it.
    pub fn imports(&self) -> impl Iterator<Item = (String, String, &str)> {
        self.imports.iter().enumerate().flat_map(move |(from, to)| {
            to.iter()
                .map(move |(to, path)| (self.tree.name(from), self.tree.name(*to), path.as_str()))
        })
    }

    /// One line per cycle: its ring, each import with the path that makes
    /// it, then any other modules of the same cycle.
    pub fn describe_cycles(&self) -> Vec<String> {
        self.cycles
            .iter()
            .map(|(cycle, by)| {
                let mut line = String::new();
                for (module, path) in cycle.ring.iter().zip(by) {
                    line.push_str(&format!("{} ({path}) -> ", self.tree.name(*module)));
                }
                line.push_str(&self.tree.name(cycle.ring[0]));
                let others: Vec<String> = cycle
                    .modules
                    .iter()
                    .filter(|m| !cycle.ring.contains(m))
                    .map(|m| self.tree.name(*m))
                    .collect();
                if !others.is_empty() {
                    line.push_str(&format!("; in the same cycle: {}", others.join(", ")));
                }
                line
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_crate_whose_imports_run_down_passes() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b; pub use a::A;"),
            ("a.rs", "use crate::b::B; pub struct A(B);"),
            ("b.rs", "pub struct B;"),
        ]);
        let report = check(&dir.path().join("lib.rs")).unwrap();
        assert_eq!(report.cycles, []);
        assert_eq!(report.count(), 2);
    }

    #[test]
    fn a_planted_cycle_is_reported_with_the_paths_that_make_it() {
        let dir = crate_of(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::B;"),
            ("b.rs", "fn f() { super::c::g(); }"),
            ("c.rs", "fn g() { crate::a::h(); }"),
        ]);
        let report = check(&dir.path().join("lib.rs")).unwrap();
        assert_eq!(
            report.describe_cycles(),
            [
                "crate::a (use crate::b::B) -> crate::b (super::c::g) -> crate::c (crate::a::h) -> crate::a"
            ]
        );
    }

    #[test]
    fn a_cycle_through_re_exports_is_a_cycle_between_the_defining_modules() {
        let dir = crate_of(&[
            ("lib.rs", "mod a; mod b; pub use a::A; pub use b::B;"),
            ("a.rs", "pub struct A(crate::B);"),
            ("b.rs", "use crate::A; pub struct B;"),
        ]);
        let report = check(&dir.path().join("lib.rs")).unwrap();
        assert_eq!(
            report.describe_cycles(),
            ["crate::a (crate::B) -> crate::b (use crate::A) -> crate::a"]
        );
    }
}
