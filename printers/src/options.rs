//! What a request for a Table asks: which Table version, whether rows carry
//! their object (and how much of it), and whether column definitions are
//! left out; read from the query as the API server reads `TableOptions`.

/// How much of each object a Table row carries (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `None`: no object (`"object":null`).
    None,
    /// `Metadata`, the default: the object's metadata as a
    /// PartialObjectMetadata.
    #[default]
    Metadata,
    /// `Object`: the whole object, as a GET of it would answer.
    Object,
}

/// The group version of the Table asked for (`Accept:
/// application/json;as=Table;v=v1;g=meta.k8s.io`): the API server answers
/// the first of the client's list it can, and kubectl lists v1 first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableVersion {
    /// `meta.k8s.io/v1`.
    #[default]
    V1,
    /// `meta.k8s.io/v1beta1`, for clients that ask only for it.
    V1Beta1,
}

impl TableVersion {
    /// The `apiVersion` of the Table and of the PartialObjectMetadata in
    /// its rows.
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// A request's Table options (metav1.TableOptions, plus the version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableOptions {
    /// The Table's group version.
    pub version: TableVersion,
    /// What each row carries of its object.
    pub include_object: IncludeObject,
    /// Leave out the column definitions. On the wire the API server reads
    /// this from a query parameter literally named `-` (the field's JSON
    /// name is "-"); kubectl never sends it. On a watch the API server sets
    /// it itself after the first event (see `TablePrinter::watch_table`).
    pub no_headers: bool,
}

/// An `includeObject` value the API server refuses with 400 ("Unable to
/// convert to Table as requested: includeObject: Invalid value: ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("includeObject must be 'Metadata', 'Object', 'None', or empty")]
pub struct InvalidIncludeObject;

impl TableOptions {
    /// The options of a request's query parameters, as the API server
    /// decodes them: the first value of `includeObject` ("" or absent is
    /// `Metadata`), and `-` true unless absent, "0" or "false" (any case).
    /// An `includeObject` it would refuse is an error; the API server's
    /// answer to that request is its own 400, so pass the request on.
    pub fn from_query<'a>(
        version: TableVersion,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<TableOptions, InvalidIncludeObject> {
        let mut include_object = None;
        let mut no_headers = None;
        for (key, value) in pairs {
            match key {
                "includeObject" if include_object.is_none() => include_object = Some(value),
                "-" if no_headers.is_none() => no_headers = Some(value),
                _ => {}
            }
        }
        let include_object = match include_object.unwrap_or("") {
            "" | "Metadata" => IncludeObject::Metadata,
            "None" => IncludeObject::None,
            "Object" => IncludeObject::Object,
            _ => return Err(InvalidIncludeObject),
        };
        let no_headers = no_headers.is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
        Ok(TableOptions {
            version,
            include_object,
            no_headers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(
        query: &[(&'static str, &'static str)],
    ) -> Result<TableOptions, InvalidIncludeObject> {
        TableOptions::from_query(TableVersion::V1, query.iter().copied())
    }

    #[test]
    fn include_object_defaults_to_metadata_and_takes_the_first_value() {
        assert_eq!(
            options(&[]).unwrap().include_object,
            IncludeObject::Metadata
        );
        assert_eq!(
            options(&[("includeObject", "")]).unwrap().include_object,
            IncludeObject::Metadata
        );
        assert_eq!(
            options(&[("includeObject", "None"), ("includeObject", "Object")])
                .unwrap()
                .include_object,
            IncludeObject::None
        );
        assert_eq!(
            options(&[("includeObject", "Object")])
                .unwrap()
                .include_object,
            IncludeObject::Object
        );
    }

    #[test]
    fn an_include_object_the_api_server_refuses_is_an_error() {
        assert_eq!(
            options(&[("includeObject", "none")]),
            Err(InvalidIncludeObject)
        );
        assert_eq!(
            options(&[("includeObject", "All")]),
            Err(InvalidIncludeObject)
        );
    }

    #[test]
    fn no_headers_is_read_from_the_dash_parameter_as_go_reads_a_bool() {
        assert!(!options(&[]).unwrap().no_headers);
        assert!(
            !options(&[("noHeaders", "true")]).unwrap().no_headers,
            "not a parameter the API server reads"
        );
        for off in ["0", "false", "FALSE"] {
            assert!(!options(&[("-", off)]).unwrap().no_headers, "{off}");
        }
        for on in ["true", "1", "", "yes"] {
            assert!(options(&[("-", on)]).unwrap().no_headers, "{on:?}");
        }
    }
}
