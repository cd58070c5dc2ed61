//! kube-apiserver's Table output (`Accept: application/json;as=Table;
//! v=v1;g=meta.k8s.io`), as the API server writes it, from objects' JSON:
//! what `kubectl get` prints, and `kubectl get -w` watches.
//!
//! - Built-in types ([`TablePrinter::builtin`]): the printers of
//!   k8s.io/kubernetes `pkg/printers/internalversion` at the control
//!   plane's version (v1.36), ported type by type, with the API server's
//!   own column definitions (generated from it), and the table convertors
//!   of the types that have no printer (Name and Created At; APIService's).
//!   A type or version not ported has no printer, so a caller passes the
//!   request to the API server: never a Table the API server would not
//!   have written.
//! - Custom resources ([`TablePrinter::custom`], [`TablePrinter::for_crd`]):
//!   apiextensions-apiserver's convertor of a CRD version's
//!   additionalPrinterColumns, their JSONPaths evaluated as client-go's
//!   JSONPath evaluates them.
//! - The Table itself: `includeObject` (None, Metadata — the default, a
//!   PartialObjectMetadata —, Object), `noHeaders`, the list metadata, row
//!   conditions, and on a watch the column definitions on the first event
//!   only ([`TablePrinter::watch_table`]). The JSON is byte for byte the
//!   API server's (Go's `encoding/json`, HTML escaping included).
//!
//! Ages are measured to the `now` a caller gives, as the API server
//! measures them to its clock when it answers. Any error means: pass the
//! request on to the API server.

mod builtin;
mod custom;
mod error;
mod json;
mod jsonpath;
mod labels;
mod metadata;
mod object;
mod options;
mod table;
mod time;

use std::time::SystemTime;

pub use custom::PrinterColumn;
pub use error::PrinterError;
pub use options::{IncludeObject, InvalidIncludeObject, TableOptions, TableVersion};

use crate::{
    builtin::{Builtin, Shape},
    custom::Custom,
    table::{Item, Meta, Table, TypeMeta},
    time::Clock,
};

/// The list metadata of a LIST's Table, as the list answer would carry it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListMeta<'a> {
    /// The list's resourceVersion.
    pub resource_version: &'a str,
    /// The continue token, "" for the last page.
    pub continue_token: &'a str,
    /// How many items are left after this page, when known.
    pub remaining_item_count: Option<i64>,
}

/// The API server's Table for one resource type.
#[derive(Debug)]
pub struct TablePrinter {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Builtin {
        builtin: Builtin,
        api_version: String,
    },
    Custom(Custom),
}

impl TablePrinter {
    /// The printer of a built-in resource (`""`, `"v1"`, `"pods"`), None if
    /// that resource at that version is not ported.
    pub fn builtin(group: &str, version: &str, resource: &str) -> Option<TablePrinter> {
        let builtin = builtin::lookup(group, version, resource)?;
        let api_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        Some(TablePrinter {
            kind: Kind::Builtin {
                builtin,
                api_version,
            },
        })
    }

    /// The printer of a custom resource version with these
    /// additionalPrinterColumns (none: the API server's Age column). A
    /// column whose JSONPath the API server parses differently than here
    /// (or not at all) is an error: pass such a type's Table requests on.
    pub fn custom(columns: &[PrinterColumn]) -> Result<TablePrinter, PrinterError> {
        Ok(TablePrinter {
            kind: Kind::Custom(Custom::new(columns)?),
        })
    }

    /// [`TablePrinter::custom`] with the columns of `version` in the JSON of
    /// a CustomResourceDefinition. Build it again when the CRD changes.
    pub fn for_crd(crd: &str, version: &str) -> Result<TablePrinter, PrinterError> {
        TablePrinter::custom(&custom::crd_columns(crd, version)?)
    }

    /// The Table of a LIST (or one page of it): one row per object, in the
    /// order given (except where the API server sorts: FlowSchemas). The
    /// JSON has no trailing newline; a response body as the API server
    /// writes it ends with one.
    pub fn list_table<'a>(
        &self,
        objects: impl IntoIterator<Item = &'a str>,
        list: &ListMeta<'_>,
        options: &TableOptions,
        now: SystemTime,
    ) -> Result<String, PrinterError> {
        let items = objects
            .into_iter()
            .map(Item::parse)
            .collect::<Result<Vec<_>, _>>()?;
        let meta = Meta {
            resource_version: list.resource_version,
            continue_token: list.continue_token,
            remaining_item_count: list.remaining_item_count,
        };
        self.write(&items, meta, options, Clock::at(now))
    }

    /// The Table of a GET of one object: its row, and the object's
    /// resourceVersion as the Table's.
    pub fn object_table(
        &self,
        object: &str,
        options: &TableOptions,
        now: SystemTime,
    ) -> Result<String, PrinterError> {
        let item = Item::parse(object)?;
        let meta = Meta {
            resource_version: item.resource_version(),
            ..Meta::default()
        };
        self.write(std::slice::from_ref(&item), meta, options, Clock::at(now))
    }

    /// The Table of one watch event's object (the `object` of a
    /// `{"type":..,"object":..}` line), as the API server's watch of
    /// `as=Table` writes it: column definitions on the stream's first
    /// event only (`first`, whatever that event's type, bookmarks and
    /// ERROR events included; an ERROR event's Status is written as it
    /// is, not as a Table), none afterwards; the row of a bookmark too
    /// (the API server prints the bookmark's near-empty object), with
    /// only metadata for the one ending the initial events.
    pub fn watch_table(
        &self,
        object: &str,
        options: &TableOptions,
        first: bool,
        now: SystemTime,
    ) -> Result<String, PrinterError> {
        let options = TableOptions {
            no_headers: options.no_headers || !first,
            ..*options
        };
        self.object_table(object, &options, now)
    }

    fn write(
        &self,
        items: &[Item<'_>],
        meta: Meta<'_>,
        options: &TableOptions,
        clock: Clock,
    ) -> Result<String, PrinterError> {
        let table = match &self.kind {
            Kind::Builtin {
                builtin,
                api_version,
            } => Table {
                options,
                columns: (!options.no_headers || builtin.shape == Shape::AlwaysHeaders)
                    .then_some(builtin.columns),
                rows: builtin.rows(items, clock)?,
                nil_rows: builtin.shape == Shape::Default,
                meta,
                type_meta: Some(TypeMeta {
                    kind: builtin.kind,
                    api_version,
                }),
                internal_annotations: builtin.internal_annotations,
            },
            Kind::Custom(custom) => Table {
                options,
                columns: (!options.no_headers).then_some(custom.columns.as_str()),
                rows: items
                    .iter()
                    .map(|item| Ok((custom.row(&item.value, clock)?, item)))
                    .collect::<Result<_, PrinterError>>()?,
                nil_rows: false,
                meta,
                type_meta: None,
                internal_annotations: |_| Ok(()),
            },
        };
        table.write()
    }
}
