//! Waiting for a condition nothing announces (an RBAC binding the API
//! server's informer has yet to see, a reflector that has yet to sync, a
//! metric that has yet to move): the condition is looked at again and
//! again until it holds or a deadline passes, and a wait that fails says
//! what it waited for and what it saw last. The one place the end-to-end
//! tests poll; where something can be awaited (a stream's next event, a
//! watch channel) they await it instead.

use std::{fmt, time::Duration};

use anyhow::{Result, bail};
use tokio::time::Instant;

/// How long a wait lasts unless [`Eventually::within`] says otherwise.
pub const WITHIN: Duration = Duration::from_secs(30);

/// How often the condition is looked at unless [`Eventually::every`] says
/// otherwise.
pub const EVERY: Duration = Duration::from_millis(100);

/// A wait for `what`: see [`Eventually`].
pub fn eventually(what: impl Into<String>) -> Eventually {
    Eventually {
        what: what.into(),
        within: WITHIN,
        every: EVERY,
    }
}

/// A wait for a condition, named for the failure message, with a deadline
/// and a polling interval; run by one of its `until` methods.
#[must_use = "a wait does nothing until it is run"]
#[derive(Debug, Clone)]
pub struct Eventually {
    what: String,
    within: Duration,
    every: Duration,
}

/// What one look at the condition found.
#[derive(Debug)]
pub enum Look<T, S> {
    /// The condition holds; the wait returns this.
    Done(T),
    /// It does not yet; this is what was seen (reported if time runs out).
    NotYet(S),
}

impl Eventually {
    /// Gives up `within` from the start of the wait.
    pub fn within(mut self, within: Duration) -> Self {
        self.within = within;
        self
    }

    /// Looks again `every` so often (each look also has to answer by the
    /// deadline).
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// Runs `probe` until it finds [`Look::Done`], and returns what it
    /// found. An error from `probe` ends the wait at once: it is a fault,
    /// not a "not yet" (return [`Look::NotYet`] for those).
    pub async fn until_done<T, S: fmt::Debug>(
        self,
        mut probe: impl AsyncFnMut() -> Result<Look<T, S>>,
    ) -> Result<T> {
        self.run(async || {
            Ok(match probe().await? {
                Look::Done(value) => Look::Done(value),
                Look::NotYet(seen) => Look::NotYet(format!("{seen:?}")),
            })
        })
        .await
    }

    /// Runs `probe` until it succeeds, and returns its value: its errors
    /// are the "not yet", and the last one is reported if time runs out.
    pub async fn until_ok<T, E: fmt::Display>(
        self,
        mut probe: impl AsyncFnMut() -> Result<T, E>,
    ) -> Result<T> {
        self.run(async || {
            Ok(match probe().await {
                Ok(value) => Look::Done(value),
                Err(err) => Look::NotYet(format!("{err:#}")),
            })
        })
        .await
    }

    /// Runs `probe` until what it returns satisfies `done`, and returns
    /// that; the last value is reported if time runs out. An error from
    /// `probe` ends the wait at once.
    pub async fn until<V: fmt::Debug>(
        self,
        mut probe: impl AsyncFnMut() -> Result<V>,
        mut done: impl FnMut(&V) -> bool,
    ) -> Result<V> {
        self.until_done(async || {
            let value = probe().await?;
            Ok(if done(&value) {
                Look::Done(value)
            } else {
                Look::NotYet(value)
            })
        })
        .await
    }

    /// The loop itself: a look, then (unless done) a pause of `every`,
    /// cut short so that the last look is at the deadline.
    async fn run<T>(self, mut probe: impl AsyncFnMut() -> Result<Look<T, String>>) -> Result<T> {
        let Eventually {
            what,
            within,
            every,
        } = self;
        let deadline = Instant::now() + within;
        let mut looks = 0u32;
        let mut last = None;
        loop {
            looks += 1;
            let Ok(look) = tokio::time::timeout_at(deadline, probe()).await else {
                bail!(
                    "{what}: not within {within:?}; look {looks} had no answer by then{}",
                    last.map(|seen| format!(" (the one before saw {seen})"))
                        .unwrap_or_default()
                );
            };
            match look? {
                Look::Done(value) => return Ok(value),
                Look::NotYet(seen) => last = Some(seen),
            }
            let now = Instant::now();
            if now >= deadline {
                bail!(
                    "{what}: not within {within:?} ({looks} looks); last seen: {}",
                    last.unwrap_or_default()
                );
            }
            tokio::time::sleep_until((now + every).min(deadline)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_what_the_look_that_found_the_condition_saw() -> Result<()> {
        let mut looks = 0;
        let found = eventually("the third look")
            .every(Duration::from_millis(1))
            .until(
                async || {
                    looks += 1;
                    Ok(looks)
                },
                |n| *n == 3,
            )
            .await?;
        assert_eq!(found, 3);
        Ok(())
    }

    #[tokio::test]
    async fn fails_at_the_deadline_naming_the_wait_and_the_last_value_seen() {
        let mut looks = 0;
        let err = eventually("a number over ten")
            .within(Duration::ZERO)
            .until(
                async || {
                    looks += 1;
                    Ok(looks)
                },
                |n| *n > 10,
            )
            .await
            .expect_err("one look, then the deadline");
        assert_eq!(
            err.to_string(),
            "a number over ten: not within 0ns (1 looks); last seen: 1"
        );
    }

    #[tokio::test]
    async fn until_ok_reports_the_last_error() {
        let err = eventually("a grant")
            .within(Duration::ZERO)
            .until_ok(async || Err::<(), _>(anyhow::anyhow!("forbidden")))
            .await
            .expect_err("never allowed");
        assert_eq!(
            err.to_string(),
            "a grant: not within 0ns (1 looks); last seen: forbidden"
        );
    }

    #[tokio::test]
    async fn an_error_from_the_probe_ends_the_wait_at_once() {
        let mut looks = 0;
        let err = eventually("anything")
            .until_done(async || -> Result<Look<(), ()>> {
                looks += 1;
                bail!("the process exited")
            })
            .await
            .expect_err("a fault");
        assert_eq!(err.to_string(), "the process exited");
        assert_eq!(looks, 1);
    }

    #[tokio::test]
    async fn a_look_that_hangs_is_cut_off_at_the_deadline() {
        let err = eventually("an answer")
            .within(Duration::from_millis(20))
            .until_ok(async || {
                std::future::pending::<()>().await;
                anyhow::Ok(())
            })
            .await
            .expect_err("no answer");
        assert_eq!(
            err.to_string(),
            "an answer: not within 20ms; look 1 had no answer by then"
        );
    }
}
