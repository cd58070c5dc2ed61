//! Where the audit log goes: the file (or standard output) its lines are
//! appended to, and the one task that writes them
//! ([`kube_fanout_auth::audit`] makes the lines and bounds their rate).

use std::path::Path;

use kube_fanout_auth::audit::{AuditLevel, AuditLog};
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span};

use crate::{
    error::{ServeError, Tasks},
    security::Security,
};

/// The audit log `security` asks for, its writer started in `tasks`
/// (until `cancel` fires and the last lines are written); off at level
/// `none`. With authentication off there is nothing to audit, and asking
/// for it is refused rather than ignored.
pub(crate) async fn start(
    security: &Security,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Result<AuditLog, ServeError> {
    let options = &security.audit;
    if options.level == AuditLevel::None {
        return Ok(AuditLog::off());
    }
    if security.auth.is_none() {
        return Err(ServeError::AuditWithoutAuth);
    }
    let sink = open(&options.path)
        .await
        .map_err(|source| ServeError::AuditLog {
            path: options.path.clone(),
            source,
        })?;
    let (log, writer) = AuditLog::new(options.level, options.max_lines_per_second);
    let stop = cancel.clone();
    let path = options.path.display().to_string();
    info!(level = %options.level, %path, max_lines_per_second = options.max_lines_per_second, "audit log on");
    tasks.spawn(
        async move {
            writer.run(sink, stop.cancelled_owned()).await;
            Ok(())
        }
        .instrument(info_span!("audit", %path)),
    );
    Ok(log)
}

/// Standard output for `-`, else the file at `path`, opened to append so
/// that a restart adds to it (created readable by its owner only: the
/// lines name users and what they asked for).
async fn open(path: &Path) -> std::io::Result<Box<dyn AsyncWrite + Send + Unpin>> {
    if path == Path::new("-") {
        return Ok(Box::new(tokio::io::stdout()));
    }
    let mut options = tokio::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    options.mode(0o600);
    Ok(Box::new(options.open(path).await?))
}

#[cfg(test)]
mod tests {
    use tokio::task::JoinSet;

    use super::*;
    use crate::security::{AuditOptions, AuthOptions};

    fn asking(level: AuditLevel, path: &Path, auth: bool) -> Security {
        Security {
            auth: auth.then(AuthOptions::default),
            audit: AuditOptions {
                level,
                path: path.to_owned(),
                ..AuditOptions::default()
            },
            ..Security::default()
        }
    }

    #[tokio::test]
    async fn an_audit_log_is_refused_without_auth_and_its_file_opened_to_append_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (mut tasks, cancel) = (JoinSet::new(), CancellationToken::new());
        let err = start(
            &asking(AuditLevel::Metadata, &path, false),
            &mut tasks,
            &cancel,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ServeError::AuditWithoutAuth), "{err}");
        let off = start(&asking(AuditLevel::None, &path, false), &mut tasks, &cancel)
            .await
            .unwrap();
        assert_eq!(off.level(), AuditLevel::None);
        assert!(
            tasks.is_empty() && !path.exists(),
            "nothing opened when off"
        );

        std::fs::write(&path, "an earlier line\n").unwrap();
        let on = start(
            &asking(AuditLevel::Request, &path, true),
            &mut tasks,
            &cancel,
        )
        .await
        .unwrap();
        assert_eq!(on.level(), AuditLevel::Request);
        drop(on);
        cancel.cancel();
        while let Some(done) = tasks.join_next().await {
            done.unwrap().unwrap();
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "an earlier line\n");

        let missing = dir.path().join("no-such-dir").join("audit.jsonl");
        let err = start(
            &asking(AuditLevel::Metadata, &missing, true),
            &mut tasks,
            &cancel,
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot open the audit log {}: ",
                missing.display()
            )),
            "{err}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let created = dir.path().join("new.jsonl");
            drop(
                start(
                    &asking(AuditLevel::Metadata, &created, true),
                    &mut tasks,
                    &cancel,
                )
                .await
                .unwrap(),
            );
            let mode = std::fs::metadata(&created).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
