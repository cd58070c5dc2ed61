//! A library crate's module tree as the compiler reads it: from its root
//! file, each `mod name;` in `name.rs` or `name/mod.rs` (or its `#[path]`),
//! each inline `mod name { ... }` in place. Modules and items compiled only
//! for tests (`#[cfg(test)]`, `#[cfg(all(test, ...))]`) are left out: they
//! are no part of the library, and a test module's `use super::*` is an
//! import of its parent only.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use syn::{Attribute, Item, Meta, Token, punctuated::Punctuated};

/// One module of the tree.
pub struct Module {
    /// Its path from the crate root: `[]` for the root, `["store",
    /// "relist"]` for `crate::store::relist`.
    pub path: Vec<String>,
    /// Its parent's index in [`Tree::modules`]; `None` for the root.
    pub parent: Option<usize>,
    /// Its child modules by name, as indexes in [`Tree::modules`].
    pub children: BTreeMap<String, usize>,
    /// Its items (child modules' items are their own), those compiled only
    /// for tests left out.
    pub items: Vec<Item>,
}

// syn's items are Debug only with its `extra-traits`, which the
// workspace's build of syn does not have.
impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("path", &self.path)
            .field("parent", &self.parent)
            .field("children", &self.children)
            .field("items", &self.items.len())
            .finish()
    }
}

/// A crate's modules; the root is the first.
#[derive(Debug)]
pub struct Tree {
    /// Every module, the root first, each parent before its children.
    pub modules: Vec<Module>,
}

/// Why a crate's module tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A source file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A source file is not Rust syn can parse.
    #[error("parsing {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The error.
        source: syn::Error,
    },
    /// A `mod name;` whose file is in neither place the compiler looks.
    #[error("module {module} declared in {declared_in}: neither {} nor {} exists", .candidates[0].display(), .candidates[1].display())]
    Missing {
        /// The module's path from the crate root.
        module: String,
        /// The file declaring it.
        declared_in: PathBuf,
        /// Where its file was looked for.
        candidates: [PathBuf; 2],
    },
}

impl Tree {
    /// Reads the tree of the crate whose root file is `root` (its `lib.rs`).
    pub fn read(root: &Path) -> Result<Tree, TreeError> {
        let mut tree = Tree {
            modules: Vec::new(),
        };
        let items = parse(root)?;
        let dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
        tree.add(Vec::new(), None, items, root, &dir)?;
        Ok(tree)
    }

    /// The module at `path` from the root, if there is one.
    pub fn find(&self, path: &[&str]) -> Option<usize> {
        path.iter()
            .try_fold(0, |at, name| self.modules[at].children.get(*name).copied())
    }

    /// `path` as the compiler names it: `crate::store::relist`.
    pub fn name(&self, module: usize) -> String {
        std::iter::once("crate")
            .chain(self.modules[module].path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("::")
    }

    /// Adds the module at `path`, whose `items` were read from `file`, and
    /// its children, whose files are under `dir`.
    fn add(
        &mut self,
        path: Vec<String>,
        parent: Option<usize>,
        items: Vec<Item>,
        file: &Path,
        dir: &Path,
    ) -> Result<usize, TreeError> {
        let index = self.modules.len();
        self.modules.push(Module {
            path: path.clone(),
            parent,
            children: BTreeMap::new(),
            items: Vec::new(),
        });
        let mut kept = Vec::new();
        for item in items {
            if only_for_tests(attrs(&item)) {
                continue;
            }
            let Item::Mod(module) = item else {
                kept.push(item);
                continue;
            };
            let name = module.ident.to_string();
            let mut child_path = path.clone();
            child_path.push(name.clone());
            let child = match module.content {
                Some((_, items)) => {
                    self.add(child_path, Some(index), items, file, &dir.join(&name))?
                }
                None => {
                    let (child_file, child_dir) = match path_attr(&module.attrs) {
                        Some(given) => {
                            let child_file = dir.join(given);
                            let child_dir = child_file.with_extension("");
                            (child_file, child_dir)
                        }
                        None => locate(dir, &name).ok_or_else(|| TreeError::Missing {
                            module: child_path.join("::"),
                            declared_in: file.to_path_buf(),
                            candidates: [
                                dir.join(format!("{name}.rs")),
                                dir.join(&name).join("mod.rs"),
                            ],
                        })?,
                    };
                    let items = parse(&child_file)?;
                    self.add(child_path, Some(index), items, &child_file, &child_dir)?
                }
            };
            self.modules[index].children.insert(name, child);
        }
        self.modules[index].items = kept;
        Ok(index)
    }
}

/// Where the file of `mod name;` is, and where its own children's are.
fn locate(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    let child_dir = dir.join(name);
    if flat.is_file() {
        Some((flat, child_dir))
    } else if nested.is_file() {
        Some((nested, child_dir))
    } else {
        None
    }
}

fn parse(path: &Path) -> Result<Vec<Item>, TreeError> {
    let text = std::fs::read_to_string(path).map_err(|source| TreeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = syn::parse_file(&text).map_err(|source| TreeError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(file.items)
}

/// The string of a `#[path = "..."]` attribute.
fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The attributes of an item, whatever its kind.
pub(crate) fn attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Whether a `#[cfg]` among `attrs` holds only when compiling tests.
pub(crate) fn only_for_tests(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg") && attr.parse_args::<Meta>().is_ok_and(|m| needs_test(&m))
    })
}

/// Whether the cfg predicate `meta` is false whenever `test` is.
fn needs_test(meta: &Meta) -> bool {
    match meta {
        Meta::Path(path) => path.is_ident("test"),
        Meta::List(list) => {
            let Ok(args) = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            else {
                return false;
            };
            if list.path.is_ident("all") {
                args.iter().any(needs_test)
            } else if list.path.is_ident("any") {
                !args.is_empty() && args.iter().all(needs_test)
            } else {
                false
            }
        }
        Meta::NameValue(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    fn names(tree: &Tree) -> Vec<String> {
        (0..tree.modules.len()).map(|m| tree.name(m)).collect()
    }

    #[test]
    fn modules_are_found_in_flat_and_nested_files_and_inline() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                ("lib.rs", "pub mod a; mod b; mod c { pub mod d; mod e {} }"),
                ("a.rs", "mod x;"),
                ("a/x.rs", ""),
                ("b/mod.rs", "mod y;"),
                ("b/y.rs", ""),
                ("c/d.rs", ""),
            ],
        );
        let tree = Tree::read(&dir.path().join("lib.rs")).unwrap();
        assert_eq!(
            names(&tree),
            [
                "crate",
                "crate::a",
                "crate::a::x",
                "crate::b",
                "crate::b::y",
                "crate::c",
                "crate::c::d",
                "crate::c::e"
            ]
        );
        assert_eq!(tree.find(&["c", "d"]), Some(6));
        assert_eq!(tree.modules[6].parent, Some(5));
    }

    #[test]
    fn test_only_modules_and_items_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[(
                "lib.rs",
                "mod a {}
                 #[cfg(test)] mod tests;
                 #[cfg(all(test, feature = \"x\"))] mod more {}
                 #[cfg(any(test, feature = \"x\"))] mod either {}
                 #[cfg(not(test))] mod not_tests {}
                 #[cfg(test)] use a::Thing;
                 fn kept() {}",
            )],
        );
        let tree = Tree::read(&dir.path().join("lib.rs")).unwrap();
        assert_eq!(
            names(&tree),
            ["crate", "crate::a", "crate::either", "crate::not_tests"]
        );
        assert_eq!(tree.modules[0].items.len(), 1, "only `fn kept`");
    }

    #[test]
    fn a_missing_module_file_is_an_error_naming_both_places() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("lib.rs", "mod gone;")]);
        let err = Tree::read(&dir.path().join("lib.rs")).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("module gone declared in "), "{text}");
        assert!(
            text.contains("gone.rs") && text.contains("gone/mod.rs"),
            "{text}"
        );
    }

    #[test]
    fn a_path_attribute_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                ("lib.rs", "#[path = \"elsewhere/m.rs\"] mod m;"),
                ("elsewhere/m.rs", "fn f() {}"),
            ],
        );
        let tree = Tree::read(&dir.path().join("lib.rs")).unwrap();
        assert_eq!(names(&tree), ["crate", "crate::m"]);
        assert_eq!(tree.modules[1].items.len(), 1);
    }
}
