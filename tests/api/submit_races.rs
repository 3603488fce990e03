//! Same-key races whose losers find the grant refusing new work: every
//! loser's answer is still the replay (or the conflict) of the winner's
//! receipt, never the refusal a new submission would get.

use futures_util::future::join_all;

use crate::helpers::TestApp;
use crate::world::{BOT, Prepare, World, grant_of, new_key, submission_of, submit_body};

/// Rounds of racing one key on a fresh grant; a loser that waited for the
/// winner's row lock is what the test is after, so it is tried several times.
const ROUNDS: usize = 6;
const RACERS: usize = 12;

both_backends!(same_key_race_at_the_limit_replays);
async fn same_key_race_at_the_limit_replays(app: TestApp) {
    let world = World::new(&app).await;
    for round in 0..ROUNDS {
        let mut form = Prepare::new(BOT, &format!("One submission, raced {round}"));
        form.max_submissions = "1".to_owned();
        let id = world.active_with(&form).await;
        let digest = world.digest(id).await;
        let key = new_key();
        let body = submit_body(&digest, &key, "Raced at the limit", "");
        let results = join_all((0..RACERS).map(|_| world.submit_with(id, body.clone()))).await;
        let created: Vec<_> = results
            .iter()
            .filter(|r| r.status.as_u16() == 201)
            .collect();
        assert_eq!(
            created.len(),
            1,
            "round {round}: exactly one submit creates"
        );
        let receipt = submission_of(created[0]);
        for resp in &results {
            if resp.status.as_u16() == 201 {
                continue;
            }
            assert_eq!(
                resp.status.as_u16(),
                200,
                "round {round}: a loser of the race is a replay, not a refusal: {}",
                resp.body
            );
            assert_eq!(submission_of(resp), receipt);
            assert_eq!(grant_of(resp)["submission_count"], 1);
        }
    }
}

both_backends!(same_key_race_with_a_withdraw_replays);
async fn same_key_race_with_a_withdraw_replays(app: TestApp) {
    let world = World::new(&app).await;
    for round in 0..ROUNDS {
        let id = world
            .active(&format!("Withdrawn under a raced key {round}"))
            .await;
        let digest = world.digest(id).await;
        let key = new_key();
        let body = submit_body(&digest, &key, "Raced against a withdraw", "");
        let submits = join_all((0..RACERS).map(|_| world.submit_with(id, body.clone())));
        let (results, withdrawn) = tokio::join!(submits, world.withdraw(id));
        withdrawn.assert_status(303);
        let created: Vec<_> = results
            .iter()
            .filter(|r| r.status.as_u16() == 201)
            .collect();
        if created.is_empty() {
            // The withdraw came first: every submit is refused alike.
            for resp in &results {
                resp.assert_error(409, "grant_revoked");
            }
            continue;
        }
        let receipt = submission_of(created[0]);
        for resp in results.iter().filter(|r| r.status.as_u16() != 201) {
            assert_eq!(
                resp.status.as_u16(),
                200,
                "round {round}: a loser of the race is a replay, not a refusal: {}",
                resp.body
            );
            assert_eq!(submission_of(resp), receipt);
        }
    }
}
