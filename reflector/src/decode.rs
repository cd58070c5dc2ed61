//! Turning the API server's JSON into the store's objects, dropping (and
//! logging) those the store cannot take, and refusing a LIST answer that
//! is not the type's list.

use kube_fanout_core::{
    fields::SelectableFields,
    object::{Object, Transform, TypeMeta},
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::warn;

use crate::error::ReflectorError;

/// A LIST answer's `metadata`.
#[derive(Deserialize)]
pub(crate) struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    pub(crate) resource_version: String,
    #[serde(default, rename = "continue")]
    pub(crate) continue_token: String,
}

/// A LIST answer, its items left undecoded.
#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    #[serde(default)]
    kind: String,
    metadata: ListMeta,
    /// `None` when absent (or null): then the answer is no list at all.
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

/// Decodes one resource type's objects.
pub(crate) struct Decoder {
    pub(crate) type_meta: TypeMeta,
    pub(crate) fields: SelectableFields,
    pub(crate) transform: Transform,
}

impl Decoder {
    /// One LIST answer's objects (those the store can take) and metadata.
    ///
    /// An answer that is not a list of this type is refused, as client-go
    /// refuses it (the typed decoder by kind, the dynamic client's
    /// `IsList` by its `items`): another apiVersion (a `meta.k8s.io/v1`
    /// Table, say), no kind, or no `items` (the API server always sends
    /// the array, empty or not). Read as a list, a Table would be an empty
    /// one, and replacing the store with it would delete every object. The
    /// kind itself is not compared with `<Kind>List`: a CRD may name its
    /// list kind otherwise (`spec.names.listKind`).
    pub(crate) fn page(&self, text: &str) -> Result<(Vec<Object>, ListMeta), ReflectorError> {
        let list: RawList = serde_json::from_str(text).map_err(ReflectorError::DecodeList)?;
        let items = match list.items {
            Some(items)
                if !list.kind.is_empty() && list.api_version == self.type_meta.api_version =>
            {
                items
            }
            _ => {
                return Err(ReflectorError::UnexpectedList {
                    expected: format!("{} {}List", self.type_meta.api_version, self.type_meta.kind),
                    found: format!("{} {}", list.api_version, list.kind),
                });
            }
        };
        let objects = items
            .iter()
            .filter_map(|raw| self.object(raw.get()))
            .collect();
        Ok((objects, list.metadata))
    }

    /// Parses an object, logging and dropping one that does not belong.
    pub(crate) fn object(&self, raw: &str) -> Option<Object> {
        match Object::from_json(raw, &self.type_meta, &self.fields, self.transform) {
            Ok(object) => Some(object),
            Err(err) => {
                warn!(error = %err, "dropping an object the store cannot take");
                None
            }
        }
    }
}
