//! Turning the API server's JSON into the store's objects, dropping (and
//! logging) those the store cannot take.

use kube_fanout_core::{
    fields::SelectableFields,
    object::{Object, Transform, TypeMeta},
};
use tracing::warn;

/// Decodes one resource type's objects.
pub(crate) struct Decoder {
    pub(crate) type_meta: TypeMeta,
    pub(crate) fields: SelectableFields,
    pub(crate) transform: Transform,
}

impl Decoder {
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
