//! A read of the API server right before a power command or a release (the pause
//! switch's gate, the remediation requests' gate): bounded in time, and a read that
//! fails or does not answer holds the command, saying what could not be read.

use std::future::Future;
use std::time::Duration;

/// The longest such a read may take; a slower one holds the command (it is retried
/// with the usual backoff).
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// `read`, within [`READ_TIMEOUT`]: its value; or what `absent` makes of its error
/// (one that means "nothing there", such as a resource not installed); or why the
/// command is held: "`what` could not be read just before (…): `outcome`".
pub async fn just_before<T>(
    what: &str,
    outcome: &str,
    read: impl Future<Output = Result<T, kube::Error>>,
    absent: impl FnOnce(&kube::Error) -> Option<T>,
) -> Result<T, String> {
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => absent(&e)
            .ok_or_else(|| format!("{what} could not be read just before ({e}): {outcome}")),
        Err(_) => Err(format!(
            "{what} could not be read within {}s just before: {outcome}",
            READ_TIMEOUT.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_found() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("not found", "NotFound")
                .with_code(404)
                .boxed(),
        )
    }

    #[tokio::test]
    async fn a_read_that_fails_or_hangs_holds_the_command_and_says_what() {
        let ok = just_before("the switch", "sent", async { Ok(3) }, |_| None).await;
        assert_eq!(ok, Ok(3));
        let failed: Result<u8, String> = just_before(
            "the switch",
            "power-off not sent",
            async { Err(not_found()) },
            |_| None,
        )
        .await;
        let e = failed.unwrap_err();
        assert!(
            e.starts_with("the switch could not be read just before ("),
            "{e}"
        );
        assert!(e.ends_with("): power-off not sent"), "{e}");
        let absent = just_before("the requests", "sent", async { Err(not_found()) }, |e| {
            matches!(e, kube::Error::Api(s) if s.code == 404).then_some(0)
        })
        .await;
        assert_eq!(absent, Ok(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_does_not_answer_in_time_holds_the_command() {
        let hung: Result<u8, String> = just_before(
            "the switch",
            "release not done",
            std::future::pending(),
            |_| None,
        )
        .await;
        assert_eq!(
            hung,
            Err("the switch could not be read within 5s just before: release not done".into())
        );
    }
}
