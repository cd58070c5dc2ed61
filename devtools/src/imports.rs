//! Which modules of a crate each module imports from: every `use` and
//! every path of two or more segments in its items (in types, expressions,
//! patterns, trait bounds, macro arguments and `macro_rules!` bodies),
//! resolved to the module it names.
//!
//! A path lands in the module that defines what it names, as the compiler
//! resolves it: `crate::store::Store` in `crate::store`,
//! `super::ring::Ring::new` in the sibling `ring`, and through the names
//! `use` items bring in (`use crate::store; store::Store::new()` lands in
//! `crate::store`), re-exports included: importing `crate::Store` where
//! `lib.rs` has `pub use store::Store` is an import of `store`, not of the
//! root (as cargo-modules resolves it). A glob import is followed for the
//! names the globbed module defines or brings in itself. Paths outside the
//! crate (`std::`, a dependency or a re-export of one, a leading `::`) and
//! paths whose first segment nothing in the module defines (a generic,
//! `Self`, a local) land nowhere. Visibility paths (`pub(in crate::x)`)
//! and attributes are no imports.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use syn::{UseTree, visit::Visit};

use crate::tree::{Tree, attrs, only_for_tests};

/// For each module (by index in [`Tree::modules`]), the other modules it
/// imports from, each with the first path that does (as written, for the
/// report).
pub type Imports = Vec<BTreeMap<usize, String>>;

/// The imports of every module of `tree`.
pub fn imports(tree: &Tree) -> Imports {
    let resolver = Resolver {
        tree,
        namespaces: tree
            .modules
            .iter()
            .map(|m| Namespace::of(&m.items))
            .collect(),
    };
    (0..tree.modules.len())
        .map(|module| {
            let mut collect = Collect {
                resolver: &resolver,
                module,
                found: BTreeMap::new(),
            };
            for item in &tree.modules[module].items {
                collect.visit_item(item);
            }
            collect.found
        })
        .collect()
}

/// The names a module's own items define and its `use` items bring in.
struct Namespace {
    /// Items defined in the module, by name.
    defined: BTreeSet<String>,
    /// Names a `use` brings in, each with the path it stands for.
    used: BTreeMap<String, Vec<String>>,
    /// The paths of its glob imports.
    globs: Vec<Vec<String>>,
}

impl Namespace {
    fn of(items: &[syn::Item]) -> Namespace {
        let mut namespace = Namespace {
            defined: BTreeSet::new(),
            used: BTreeMap::new(),
            globs: Vec::new(),
        };
        for item in items {
            let defined = match item {
                syn::Item::Use(item) if item.leading_colon.is_none() => {
                    for (name, path) in flatten(&item.tree, Vec::new()) {
                        match name {
                            Some(name) => {
                                namespace.used.insert(name, path);
                            }
                            None => namespace.globs.push(path),
                        }
                    }
                    continue;
                }
                syn::Item::Const(i) => &i.ident,
                syn::Item::Enum(i) => &i.ident,
                syn::Item::Fn(i) => &i.sig.ident,
                syn::Item::Static(i) => &i.ident,
                syn::Item::Struct(i) => &i.ident,
                syn::Item::Trait(i) => &i.ident,
                syn::Item::TraitAlias(i) => &i.ident,
                syn::Item::Type(i) => &i.ident,
                syn::Item::Union(i) => &i.ident,
                syn::Item::Macro(syn::ItemMacro {
                    ident: Some(ident), ..
                }) => ident,
                _ => continue,
            };
            namespace.defined.insert(defined.to_string());
        }
        namespace
    }
}

/// The paths of a `use` tree, each with the name it brings in (`None` for
/// a glob).
fn flatten(tree: &UseTree, prefix: Vec<String>) -> Vec<(Option<String>, Vec<String>)> {
    let with = |last: String| {
        let mut path = prefix.clone();
        path.push(last);
        path
    };
    match tree {
        UseTree::Path(p) => flatten(&p.tree, with(p.ident.to_string())),
        // `use a::b::{self}` brings in `b`.
        UseTree::Name(n) if n.ident == "self" => {
            let name = prefix.last().cloned();
            vec![(name, prefix)]
        }
        UseTree::Name(n) => vec![(Some(n.ident.to_string()), with(n.ident.to_string()))],
        UseTree::Rename(r) if r.ident == "self" => vec![(Some(r.rename.to_string()), prefix)],
        UseTree::Rename(r) => vec![(Some(r.rename.to_string()), with(r.ident.to_string()))],
        UseTree::Glob(_) => vec![(None, prefix)],
        UseTree::Group(g) => g
            .items
            .iter()
            .flat_map(|tree| flatten(tree, prefix.clone()))
            .collect(),
    }
}

struct Resolver<'t> {
    tree: &'t Tree,
    namespaces: Vec<Namespace>,
}

/// Where a name looked up in a module leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// A module of the crate.
    Module(usize),
    /// An item defined in this module of the crate.
    Item(usize),
    /// Something outside the crate.
    Outside,
    /// Nothing the module's items tell of (a local, a generic, an item a
    /// macro or `include!` makes).
    Unknown,
}

impl Resolver<'_> {
    /// The module of the crate that `path`, written in module `from`,
    /// lands in (see the module docs); `None` outside the crate.
    fn resolve(&self, from: usize, path: &[String]) -> Option<usize> {
        match self.walk(from, path, 0) {
            Found::Module(m) | Found::Item(m) => Some(m),
            Found::Outside | Found::Unknown => None,
        }
    }

    /// Where `path`, written in `from`, leads.
    fn walk(&self, from: usize, path: &[String], depth: usize) -> Found {
        let modules = &self.tree.modules;
        let Some((first, rest)) = path.split_first() else {
            return Found::Unknown;
        };
        let mut at = match first.as_str() {
            "crate" | "$crate" => Found::Module(0),
            "self" => Found::Module(from),
            "super" => modules[from].parent.map_or(Found::Unknown, Found::Module),
            name => self.lookup(from, name, depth),
        };
        for segment in rest {
            let Found::Module(m) = at else {
                // An enum's variant, an associated item: still the item's
                // module.
                break;
            };
            at = match segment.as_str() {
                "self" => at,
                "super" => modules[m].parent.map_or(Found::Unknown, Found::Module),
                name => match self.lookup(m, name, depth) {
                    // Named through a module, so in it as far as can be told.
                    Found::Unknown => Found::Item(m),
                    found => found,
                },
            };
        }
        at
    }

    /// Where `name` in module `at` leads: a child module, an item defined
    /// there, or what a `use` of `at` (by name, else by glob) brings in.
    fn lookup(&self, at: usize, name: &str, depth: usize) -> Found {
        // A `use` naming a `use` naming ...: Rust refuses a ring of them,
        // so this bounds only `use serde;` (a name standing for itself)
        // and globs importing each other.
        if depth > 16 {
            return Found::Outside;
        }
        let namespace = &self.namespaces[at];
        if let Some(child) = self.tree.modules[at].children.get(name) {
            return Found::Module(*child);
        }
        if namespace.defined.contains(name) {
            return Found::Item(at);
        }
        if let Some(path) = namespace.used.get(name) {
            return match self.walk(at, path, depth + 1) {
                Found::Unknown => Found::Outside,
                found => found,
            };
        }
        for glob in &namespace.globs {
            if let Found::Module(source) = self.walk(at, glob, depth + 1)
                && source != at
            {
                match self.lookup(source, name, depth + 1) {
                    Found::Unknown | Found::Outside => {}
                    found => return found,
                }
            }
        }
        Found::Unknown
    }
}

/// Collects one module's imports.
struct Collect<'r, 't> {
    resolver: &'r Resolver<'t>,
    module: usize,
    found: BTreeMap<usize, String>,
}

impl Collect<'_, '_> {
    fn found(&mut self, path: &[String], written: impl FnOnce() -> String) {
        if let Some(target) = self.resolver.resolve(self.module, path)
            && target != self.module
        {
            self.found.entry(target).or_insert_with(written);
        }
    }

    /// Paths written in a macro's tokens: runs of `name::name...`, `$crate`
    /// read as `crate`.
    fn scan(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let is_colon = |at: usize, joint: bool| {
            matches!(tokens.get(at), Some(TokenTree::Punct(p))
                if p.as_char() == ':' && (!joint || p.spacing() == Spacing::Joint))
        };
        let ident = |at: usize| match tokens.get(at) {
            Some(TokenTree::Ident(i)) => Some(i.to_string()),
            _ => None,
        };
        let mut at = 0;
        while at < tokens.len() {
            if let TokenTree::Group(group) = &tokens[at] {
                if group.delimiter() != Delimiter::None || !group.stream().is_empty() {
                    self.scan(group.stream());
                }
                at += 1;
                continue;
            }
            let dollar = matches!(&tokens[at], TokenTree::Punct(p) if p.as_char() == '$');
            let start = if dollar { at + 1 } else { at };
            // A path that starts with `::` is outside the crate, and one
            // after `>::` (`<T as Trait>::Item`) or another `::` is the
            // tail of one already read.
            let preceded = start >= 2 && is_colon(start - 1, false) && is_colon(start - 2, true);
            let Some(first) = ident(start) else {
                at += 1;
                continue;
            };
            let mut path = vec![if dollar && first == "crate" {
                "$crate".to_owned()
            } else {
                first
            }];
            let mut next = start + 1;
            while is_colon(next, true) && is_colon(next + 1, false) {
                let Some(segment) = ident(next + 2) else {
                    break;
                };
                path.push(segment);
                next += 3;
            }
            if !preceded && path.len() >= 2 {
                let written = path.join("::");
                self.found(&path, || written);
            }
            at = next;
        }
    }
}

impl<'ast> Visit<'ast> for Collect<'_, '_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !only_for_tests(attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !only_for_tests(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_some() {
            return;
        }
        for (_, path) in flatten(&item.tree, Vec::new()) {
            self.found(&path, || format!("use {}", path.join("::")));
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() >= 2 {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.found(&segments, || segments.join("::"));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::visit_macro(self, mac);
        self.scan(mac.tokens.clone());
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The imports of a crate written from `files`, by module name.
    fn imports_of(files: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let tree = Tree::read(&dir.path().join(Path::new("lib.rs"))).unwrap();
        imports(&tree)
            .iter()
            .enumerate()
            .filter(|(_, to)| !to.is_empty())
            .map(|(from, to)| (tree.name(from), to.keys().map(|t| tree.name(*t)).collect()))
            .collect()
    }

    fn expect(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(from, to)| (from.to_string(), to.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    #[test]
    fn use_items_import_the_module_they_name() {
        let found = imports_of(&[
            ("lib.rs", "mod a; mod b; mod c; pub use a::A;"),
            ("a.rs", "use crate::b::{B, other::{X as Y}}; use super::c;"),
            ("b.rs", "use std::sync::Arc; use ::tokio::sync::Mutex;"),
            ("c.rs", ""),
        ]);
        assert_eq!(
            found,
            expect(&[
                ("crate", &["crate::a"]),
                ("crate::a", &["crate::b", "crate::c"]),
            ])
        );
    }

    #[test]
    fn paths_in_code_import_the_module_they_name() {
        let found = imports_of(&[
            ("lib.rs", "mod a; mod b; mod c; mod d; mod e;"),
            ("a.rs", "fn f() { super::b::g(); }"),
            ("b.rs", "struct S(crate::c::T);"),
            (
                "c.rs",
                "impl crate::d::Tr for X {} fn h<T: crate::e::Tr>(_: Vec<T>) {}",
            ),
            ("d.rs", "fn f(x: X) { match x { X::A => {}, _ => {} } }"),
            ("e.rs", ""),
        ]);
        assert_eq!(
            found,
            expect(&[
                ("crate::a", &["crate::b"]),
                ("crate::b", &["crate::c"]),
                ("crate::c", &["crate::d", "crate::e"]),
            ])
        );
    }

    #[test]
    fn a_path_through_an_imported_module_imports_that_module() {
        let found = imports_of(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b as other; fn f() { other::g(); }"),
            (
                "b.rs",
                "mod inner; use self::inner as i; fn f() { i::X::new(); }",
            ),
            ("b/inner.rs", ""),
        ]);
        assert_eq!(
            found,
            expect(&[
                ("crate::a", &["crate::b"]),
                ("crate::b", &["crate::b::inner"])
            ])
        );
    }

    #[test]
    fn paths_in_macro_arguments_and_macro_rules_bodies_are_imports() {
        let found = imports_of(&[
            ("lib.rs", "mod a; mod b; mod c; mod d;"),
            (
                "a.rs",
                "fn f() { assert!(matches!(x, crate::b::E::V), \"{}\", crate::c::C); }",
            ),
            ("b.rs", "macro_rules! m { () => { $crate::d::D } }"),
            (
                "c.rs",
                "fn f() { tokio::select! { _ = std::future::ready(()) => {} } }",
            ),
            ("d.rs", ""),
        ]);
        assert_eq!(
            found,
            expect(&[
                ("crate::a", &["crate::b", "crate::c"]),
                ("crate::b", &["crate::d"]),
            ])
        );
    }

    #[test]
    fn an_item_imported_through_re_exports_imports_its_defining_module() {
        let found = imports_of(&[
            (
                "lib.rs",
                "mod a; mod b; mod c; pub use b::B; pub use kube::Api as K;",
            ),
            (
                "a.rs",
                "use crate::B; use super::K; fn f() { crate::c::Again::new(); }",
            ),
            ("b.rs", "mod inner; pub use self::inner::*;"),
            ("b/inner.rs", "pub struct B;"),
            ("c.rs", "pub use super::b::B as Again;"),
        ]);
        assert_eq!(
            found,
            expect(&[
                ("crate", &["crate::b::inner"]),
                ("crate::a", &["crate::b::inner"]),
                ("crate::b", &["crate::b::inner"]),
                ("crate::c", &["crate::b::inner"]),
            ])
        );
    }

    #[test]
    fn visibility_paths_attributes_locals_and_test_code_are_no_imports() {
        let found = imports_of(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "pub(in crate::b) struct S;
                 #[doc = \"crate::b::X\"] #[derive(crate::b::Derive)] struct T;
                 fn f<T: Tr>() { T::new(); Self::g(); }
                 #[cfg(test)] use crate::b::X;
                 impl S { #[cfg(test)] fn t() { crate::b::y(); } }
                 #[cfg(test)] mod tests { use crate::b::*; }",
            ),
            ("b.rs", ""),
        ]);
        assert_eq!(found, expect(&[]));
    }
}
