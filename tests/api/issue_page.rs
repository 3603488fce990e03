//! The HTML issue page: where a receipt's `issue.url` points.

use crate::helpers::{Auth, TestApp};
use crate::world::{World, new_key};

both_backends!(a_receipt_url_opens_the_issue_page_for_readers);
async fn a_receipt_url_opens_the_issue_page_for_readers(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Issue page").await;
    let key = new_key();
    let receipt = world
        .submitted(id, &key, "Due dates land", "Body <b>kept</b>")
        .await;
    let url = receipt["issue"]["url"].as_str().unwrap();
    let path = url
        .strip_prefix(&app.base)
        .expect("the URL is on the public URL");

    let page = world.alice.get_page(path).await;
    page.assert_status(200);
    assert!(page.body.contains("Due dates land"), "{}", page.body);
    assert!(page.body.contains(&format!("agent work grant #{id}")));
    assert!(page.body.contains(&key));
    // The body is escaped, never rendered as markup.
    assert!(
        page.body.contains("Body &lt;b&gt;kept&lt;/b&gt;")
            || page.body.contains("Body &#60;b&#62;kept")
    );

    // Someone who cannot read the private repository sees a 404.
    let outsider = world.human("eve", None).await;
    outsider.get_page(path).await.assert_status(404);
    // No session: the login page.
    let anonymous = app.get(path, Auth::None).await;
    assert_eq!(anonymous.status.as_u16(), 303);
    // Unknown and malformed indexes are 404 pages.
    let missing = path.rsplit_once('/').unwrap().0;
    world
        .alice
        .get_page(&format!("{missing}/999"))
        .await
        .assert_status(404);
    world
        .alice
        .get_page(&format!("{missing}/0"))
        .await
        .assert_status(404);
}
