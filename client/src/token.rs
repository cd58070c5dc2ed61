//! The bearer token: attached to every request, fixed or read from a file
//! again whenever the file changes.

use std::{
    fmt,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use tonic::{
    Request, Status,
    metadata::{Ascii, MetadataValue},
    service::Interceptor,
};

use crate::error::ClientError;

/// Adds `authorization: Bearer ...` to every request when a token is set:
/// a fixed one, or one read from a file and read again whenever the file
/// changes (projected ServiceAccount tokens rotate in place).
#[derive(Clone, Default)]
pub struct BearerToken(Option<TokenSource>);

#[derive(Clone)]
enum TokenSource {
    Fixed(MetadataValue<Ascii>),
    File(Arc<TokenFile>),
}

/// A file's (modified, length): what tells that it changed.
type Stamp = Option<(SystemTime, u64)>;

/// A token file and what was last read from it.
struct TokenFile {
    path: PathBuf,
    /// The file's stamp when read, and its header value.
    read: Mutex<Option<(Stamp, MetadataValue<Ascii>)>>,
}

impl TokenFile {
    fn stamp(&self) -> Stamp {
        let meta = std::fs::metadata(&self.path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    /// The header for the file's current token, re-read if it changed.
    fn header(&self) -> Result<MetadataValue<Ascii>, ClientError> {
        let stamp = self.stamp();
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, value)) = &*read
            && *seen == stamp
            && stamp.is_some()
        {
            return Ok(value.clone());
        }
        let token =
            std::fs::read_to_string(&self.path).map_err(|source| ClientError::TokenFile {
                path: self.path.clone(),
                source,
            })?;
        let value = header(token.trim())?;
        *read = Some((stamp, value.clone()));
        Ok(value)
    }
}

fn header(token: &str) -> Result<MetadataValue<Ascii>, ClientError> {
    format!("Bearer {token}")
        .parse()
        .map_err(ClientError::Token)
}

impl BearerToken {
    /// A token sent as `authorization: Bearer TOKEN`.
    pub fn new(token: &str) -> Result<Self, ClientError> {
        Ok(BearerToken(Some(TokenSource::Fixed(header(token)?))))
    }

    /// The token in `path`, read now (so a missing file fails here) and
    /// again whenever the file changes.
    pub fn from_file(path: impl Into<PathBuf>) -> Result<Self, ClientError> {
        let file = TokenFile {
            path: path.into(),
            read: Mutex::new(None),
        };
        file.header()?;
        Ok(BearerToken(Some(TokenSource::File(Arc::new(file)))))
    }
}

// The token is a credential: never print it.
impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("BearerToken(None)"),
            Some(TokenSource::Fixed(_)) => f.write_str("BearerToken(<redacted>)"),
            Some(TokenSource::File(file)) => write!(f, "BearerToken(file {})", file.path.display()),
        }
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let value = match &self.0 {
            None => return Ok(request),
            Some(TokenSource::Fixed(value)) => value.clone(),
            Some(TokenSource::File(file)) => file
                .header()
                .map_err(|e| Status::unauthenticated(e.to_string()))?,
        };
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientConfig;

    fn sent(token: &mut BearerToken) -> String {
        let request = token.call(Request::new(())).unwrap();
        request
            .metadata()
            .get("authorization")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let mut token = BearerToken::from_file(&path).unwrap();
        assert_eq!(sent(&mut token), "Bearer first");
        std::fs::write(&path, "rotated-token").unwrap();
        assert_eq!(sent(&mut token), "Bearer rotated-token");
        assert!(
            !format!("{:?}", ClientConfig::new(["a"]).bearer_token("secret")).contains("secret")
        );
        std::fs::remove_file(&path).unwrap();
        let status = token.call(Request::new(())).unwrap_err();
        assert!(
            status
                .message()
                .contains("cannot read the bearer token file"),
            "{status:?}"
        );
        assert!(
            BearerToken::from_file(&path).is_err(),
            "a missing file fails at once"
        );
    }

    #[test]
    fn the_token_travels_as_a_bearer_header_and_is_never_printed() {
        let mut token = BearerToken::new("s3cret").unwrap();
        let request = token.call(Request::new(())).unwrap();
        assert_eq!(
            request.metadata().get("authorization").unwrap(),
            "Bearer s3cret"
        );
        assert!(!format!("{token:?}").contains("s3cret"));
        assert!(matches!(
            BearerToken::new("bad\ntoken"),
            Err(ClientError::Token(_))
        ));
        let none = BearerToken::default().call(Request::new(())).unwrap();
        assert!(none.metadata().get("authorization").is_none());
    }
}
