//! The web UI of a real server: signing in with a token kept in the session cookie, and the
//! queues page, read as HTML and rendered by headless Chromium, whose screenshot must show the
//! fair-share bars in the proportions of the queues' weights.

use crate::common::{Server, config, job};
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

const TOKEN: &str = "ui-admin-token-0123456789abcdef";

/// A ready server in `dir` with auth on and one admin token, [`TOKEN`] (principal `ops`).
async fn admin_server(dir: &Path) -> Server {
    let text = config(dir, "").replace(
        "[auth]\nenabled = false\n",
        &format!(
            "[auth]\nenabled = true\ntokens = [ {{ token = \"{TOKEN}\", principal = \"ops\", roles = [\"admin\"] }} ]\n"
        ),
    );
    let s = Server::start_in(dir, &text);
    s.ready().await;
    s
}

/// Posts the login form with `encoded`, the token as form-encoded text.
async fn sign_in(http: &reqwest::Client, url: &str, encoded: &str) -> reqwest::Response {
    http.post(format!("{url}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={encoded}"))
        .send()
        .await
        .expect("post")
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

#[tokio::test]
async fn signing_in_keeps_the_token_in_an_http_only_cookie_and_a_wrong_one_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = admin_server(tmp.path()).await;
    let http = no_redirects();
    // Without a session, pages send to the login form.
    let r = http.get(format!("{}/ui/queues", s.url)).send().await.expect("get");
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().ok()), (303, Some("/ui/login")));
    let r = http.get(format!("{}/", s.url)).send().await.expect("get /");
    assert_eq!(r.headers()["location"], "/ui/queues");
    let form = http.get(format!("{}/ui/login", s.url)).send().await.expect("form").text().await.expect("text");
    assert!(form.contains("name=\"token\""), "{form}");
    // A wrong token: 401 and the reason on the form; no cookie.
    let r = sign_in(&http, &s.url, "nope").await;
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.text().await.expect("text").contains("the bearer token is not valid"));
    let r = sign_in(&http, &s.url, "a+b%3Bc").await;
    assert_eq!(r.status().as_u16(), 400);
    // The right one: the cookie, HttpOnly and SameSite=Strict, opens the pages.
    let r = sign_in(&http, &s.url, TOKEN).await;
    assert_eq!(r.status().as_u16(), 303);
    let cookie = r.headers()["set-cookie"].to_str().expect("ascii").to_string();
    assert!(
        cookie.starts_with(&format!("convoy_token={TOKEN};"))
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap_or_default().to_string();
    let r = http.get(format!("{}/ui/queues", s.url)).header("cookie", &pair).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().await.expect("text").contains("Signed in as ops"));
    // The API still wants its header: the cookie is the UI's.
    let r = http.get(format!("{}/v1/queues", s.url)).header("cookie", &pair).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 401);
    // Signing out clears it.
    let r = http.post(format!("{}/ui/logout", s.url)).header("cookie", &pair).send().await.expect("post");
    assert!(r.headers()["set-cookie"].to_str().is_ok_and(|c| c.contains("Max-Age=0")));
}

/// Two queues with weights 1 and 1/3 (priority factors 1 and 3) both wanting more than a 4-core
/// node: fair shares 75% and 25%, on the page as text and, in Chromium's rendering, as bars of
/// 225 and 75 pixels.
#[tokio::test]
async fn the_queues_page_shows_fair_shares_as_bars_in_proportion() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = Server::start_in(tmp.path(), &config(tmp.path(), ""));
    s.ready().await;
    for (q, factor) in [("heavy", 1.0), ("light", 3.0)] {
        let (st, v) = s.post("/v1/queues", &json!({"name": q, "priority_factor": factor})).await;
        assert_eq!(st, 201, "{v}");
    }
    s.poll("e1", &[json!({"name": "n1", "allocatable": {"cpu": "4", "memory": "16Gi"}})], &[], 0.0).await;
    for q in ["heavy", "light"] {
        s.submit(q, "s", (0..8).map(|_| job("1")).collect()).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let html = loop {
        let html = s.client.get(format!("{}/ui/queues", s.url)).send().await.expect("get").text().await.expect("text");
        if html.contains("75.0%") && html.contains("25.0%") {
            break html;
        }
        assert!(Instant::now() < deadline, "no shares on the page: {html}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        html.contains("<a href=\"/ui/queues/heavy\">heavy</a></td><td>1.000</td>")
            && html.contains("<a href=\"/ui/queues/light\">light</a></td><td>0.333</td>"),
        "{html}"
    );
    assert!(html.contains("<rect class=\"fair\" x=\"0\" y=\"0\" width=\"225\""), "{html}");
    assert!(html.contains("<rect class=\"fair\" x=\"0\" y=\"0\" width=\"75\""), "{html}");
    // Each queue wants 8 cores of the node's 4: demand 200%, its bar stopping at the whole pool.
    assert_eq!(html.matches("<td class=\"num\">200.0%</td>").count(), 2, "{html}");
    assert_eq!(html.matches("<rect class=\"demand\" x=\"0\" y=\"54\" width=\"300\"").count(), 2, "{html}");

    let Some(chromium) = chromium() else {
        assert!(
            !crate::common::root::required("CONVOY_REQUIRE_CHROMIUM"),
            "CONVOY_REQUIRE_CHROMIUM=1 but chromium is missing"
        );
        eprintln!("SKIPPED the screenshot check: no chromium on this machine");
        return;
    };
    let shot = tmp.path().join("queues.png");
    let out = std::process::Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1"])
        .arg("--window-size=1200,900")
        .arg(format!("--user-data-dir={}", tmp.path().join("chromium").display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("{}/ui/queues", s.url))
        .output()
        .expect("chromium runs");
    assert!(shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    // Rows of the fair-share colour (#4c78a8): the longest run of it in each row is a bar.
    let lengths = colour_runs(&shot, [0x4c, 0x78, 0xa8]);
    let (long, short) =
        (lengths.iter().max().copied().unwrap_or(0), lengths.iter().filter(|l| **l > 20).min().copied().unwrap_or(0));
    assert!((223..=227).contains(&long) && (73..=77).contains(&short), "bars of {long} and {short} px: {lengths:?}");
    let ratio = long as f64 / short as f64;
    assert!((ratio - 3.0).abs() < 0.1, "heavy's bar is {ratio:.2} times light's, not 3");
}

/// Debian's `chromium`, when installed.
fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().find(|p| Path::new(p).exists())
}

/// The length of the longest run of `rgb` in each pixel row of the PNG at `path` that has one.
fn colour_runs(path: &Path, rgb: [u8; 3]) -> Vec<usize> {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).expect("png")));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png frame");
    let channels = info.color_type.samples();
    let mut runs = Vec::new();
    for row in buf[..info.buffer_size()].chunks(info.line_size) {
        let (mut best, mut run) = (0, 0);
        for px in row.chunks(channels) {
            run = if px.len() >= 3 && px[..3] == rgb { run + 1 } else { 0 };
            best = best.max(run);
        }
        if best > 0 {
            runs.push(best);
        }
    }
    runs
}

/// The jobs table filters by queue, job set and state, pages with a link, names a bad filter,
/// and escapes what users named; a job's page shows why it waits, its events and its pod spec.
#[tokio::test]
async fn the_jobs_pages_list_filter_page_and_show_a_job() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = Server::start_in(tmp.path(), &config(tmp.path(), ""));
    s.ready().await;
    s.create_queue("q").await;
    s.create_queue("other").await;
    let set = "<b>set</b> & co";
    let ids = s.submit("q", set, (0..3).map(|_| job("1")).collect()).await;
    s.submit("other", "s", vec![job("1")]).await;
    let page = |path: String| {
        let c = s.client.clone();
        async move {
            let r = c.get(path).send().await.expect("get");
            (r.status().as_u16(), r.text().await.expect("text"))
        }
    };
    let (st, html) = page(format!("{}/ui/jobs?queue=q&state=queued&limit=2&order=oldest", s.url)).await;
    assert_eq!(st, 200, "{html}");
    assert_eq!(html.matches("<tr data-job=").count(), 2, "{html}");
    assert!(html.contains(&format!("<a href=\"/ui/jobs/{}\">", ids[0])) && !html.contains(&ids[2]), "{html}");
    assert!(html.contains("&lt;b&gt;set&lt;/b&gt; &amp; co") && !html.contains("<b>set</b>"), "{html}");
    assert!(html.contains("data-live=") && html.contains("/ui/app.js"), "{html}");
    // The next page, by its link.
    let href = html.split("class=\"next\" href=\"").nth(1).and_then(|r| r.split('"').next()).expect("a next link");
    let (_, next) = page(format!("{}{}", s.url, href.replace("&amp;", "&"))).await;
    assert_eq!(next.matches("<tr data-job=").count(), 1, "{next}");
    assert!(next.contains(&ids[2]), "{next}");
    // Newest first by default, its heading turning the order around; text finds by id.
    let (_, html) = page(format!("{}/ui/jobs?queue=q", s.url)).await;
    let rows: Vec<&str> = html.split("<tr data-job=\"").skip(1).filter_map(|r| r.split('"').next()).collect();
    assert_eq!(rows, vec![ids[2].as_str(), ids[1].as_str(), ids[0].as_str()], "{html}");
    assert!(html.contains("<option value=\"newest\" selected>") && html.contains("order=oldest\""), "{html}");
    let (_, html) = page(format!("{}/ui/jobs?text={}", s.url, ids[1][18..].to_lowercase())).await;
    assert_eq!(html.matches("<tr data-job=").count(), 1, "{html}");
    assert!(html.contains(&ids[1]), "{html}");
    let (st, v) = s.get("/v1/jobs?queue=q&order=sideways").await;
    assert_eq!((st, v["field"].as_str()), (400, Some("order")), "{v}");
    // Job set filter, with the queue; another state shows none.
    let (_, html) = page(format!("{}/ui/jobs?queue=q&job_set=%3Cb%3Eset%3C%2Fb%3E%20%26%20co", s.url)).await;
    assert_eq!(html.matches("<tr data-job=").count(), 3, "{html}");
    let (_, html) = page(format!("{}/ui/jobs?queue=q&state=running", s.url)).await;
    assert!(html.contains("No jobs."), "{html}");
    let (st, html) = page(format!("{}/ui/jobs?state=sleeping", s.url)).await;
    assert_eq!(st, 400);
    assert!(html.contains("state: ") && html.contains("is not a job state"), "{html}");
    // A job's page: "why" says what the API's `reason` says (the same scheduler's words).
    let deadline = Instant::now() + Duration::from_secs(10);
    let html = loop {
        let reason = s.job(&ids[0]).await["reason"].as_str().map(str::to_string);
        let (st, html) = page(format!("{}/ui/jobs/{}", s.url, ids[0])).await;
        assert_eq!(st, 200, "{html}");
        let why =
            html.split("<dd class=\"why\">").nth(1).and_then(|r| r.split("</dd>").next()).unwrap_or("").to_string();
        let expected = reason.as_deref().map_or("—".to_string(), |r| {
            r.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
                .replace('\'', "&#39;")
        });
        if why == expected {
            break html;
        }
        assert!(Instant::now() < deadline, "why {why:?} against the API's {reason:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(html.contains("<dd class=\"state queued\">queued</dd>"), "{html}");
    assert!(
        html.contains("<h2>Pod spec</h2><pre class=\"spec\">") && html.contains("&quot;containers&quot;"),
        "{html}"
    );
    assert!(html.contains("<ol class=\"events\"><li>"), "{html}");
    let (st, _) = page(format!("{}/ui/jobs/not-an-id", s.url)).await;
    assert_eq!(st, 400);
    let (st, _) = page(format!("{}/ui/jobs/01M85WCFXWR5DG3NYMGV000000", s.url)).await;
    assert_eq!(st, 404);
    // The queue's page: its job sets with their jobs by state, linked to the filtered table.
    s.submit("q", "second", vec![job("1")]).await;
    let cancel = json!({"queue": "q", "job_set": set, "job_ids": [ids[1]]});
    let (st, v) = s.post("/v1/jobs/cancel", &cancel).await;
    assert_eq!(st, 200, "{v}");
    let (st, html) = page(format!("{}/ui/queues/q", s.url)).await;
    assert_eq!(st, 200, "{html}");
    let row = |name: &str| {
        let start = format!("<tr data-job-set=\"{name}\">");
        html.split(&start).nth(1).and_then(|r| r.split("</tr>").next()).map(|r| {
            r.split("<td class=\"num\">")
                .skip(1)
                .filter_map(|c| c.split('<').next())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
    };
    // queued, leased, pending, running, ended, stored
    assert_eq!(
        row("&lt;b&gt;set&lt;/b&gt; &amp; co"),
        Some(["2", "0", "0", "0", "1", "3"].map(String::from).to_vec()),
        "{html}"
    );
    assert_eq!(row("second"), Some(["1", "0", "0", "0", "0", "1"].map(String::from).to_vec()), "{html}");
    assert!(html.contains("href=\"/ui/jobs?queue=q&amp;job_set=second\""), "{html}");
    assert!(!html.contains("data-job-set=\"s\""), "another queue's job set: {html}");
    assert!(html.contains("data-live=\"queue=q\""), "{html}");
    let (st, _) = page(format!("{}/ui/queues/nope", s.url)).await;
    assert_eq!(st, 404);
    let (st, _) = page(format!("{}/ui/queues/Not%20A%20Name", s.url)).await;
    assert_eq!(st, 400);
}

/// chromedriver (Debian's `chromium-driver`) on its own port, in a process group of its own
/// with the browser it starts: the whole group is killed when dropped, also when a test fails
/// before closing its session.
struct Chromedriver(std::process::Child);

impl Drop for Chromedriver {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: kill(2) with a negative pid signals the group; no memory is involved.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.0.wait();
    }
}

/// A headless Chromium session driven over WebDriver, or None (the test skipped) when Chromium
/// or chromedriver is missing and CI did not ask for them.
async fn browser(dir: &Path) -> Option<(Chromedriver, fantoccini::Client)> {
    let driver = ["/usr/bin/chromedriver"].into_iter().find(|p| Path::new(p).exists());
    let (Some(chromium), Some(driver)) = (chromium(), driver) else {
        assert!(
            !crate::common::root::required("CONVOY_REQUIRE_CHROMIUM"),
            "CONVOY_REQUIRE_CHROMIUM=1 but chromium or chromedriver is missing"
        );
        eprintln!("SKIPPED the browser-driven check: no chromium and chromedriver on this machine");
        return None;
    };
    let port = crate::common::procs::free_port();
    let child = std::process::Command::new(driver)
        .process_group(0)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let guard = Chromedriver(child);
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(format!("{url}/status")).await.is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not answer on {url}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let caps = json!({"goog:chromeOptions": {"binary": chromium, "args": [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900",
        format!("--user-data-dir={}", dir.join("chromium-profile").display()),
    ]}});
    let caps = caps.as_object().cloned().expect("an object");
    let client = fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&url)
        .await
        .expect("a WebDriver session");
    Some((guard, client))
}

/// In a real browser: signing in on the form, the jobs table showing a job submitted meanwhile
/// without the page being loaded again (the event stream said so), and a job cancelled by
/// clicking through its confirmation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_table_follows_submissions_and_a_cancel_is_clicked_through() {
    use fantoccini::Locator;
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = admin_server(tmp.path()).await;
    let api = |req: reqwest::RequestBuilder| req.bearer_auth(TOKEN);
    let r = api(s.client.post(format!("{}/v1/queues", s.url))).json(&json!({"name": "q"})).send().await.expect("queue");
    assert_eq!(r.status().as_u16(), 201);
    let submit = || async {
        let r = api(s.client.post(format!("{}/v1/jobs", s.url)))
            .json(&json!({"queue": "q", "job_set": "s", "jobs": [job("1")]}))
            .send()
            .await
            .expect("submit");
        let v: serde_json::Value = r.json().await.expect("json");
        v["job_ids"][0].as_str().expect("an id").to_string()
    };
    let first = submit().await;
    let Some((_driver, c)) = browser(tmp.path()).await else { return };
    // Signing in: any page leads to the form first.
    c.goto(&format!("{}/ui/jobs?queue=q", s.url)).await.expect("goto");
    c.wait().for_element(Locator::Css("input[name=token]")).await.expect("the sign-in form");
    c.form(Locator::Css("form"))
        .await
        .expect("form")
        .set_by_name("token", TOKEN)
        .await
        .expect("token")
        .submit()
        .await
        .expect("sign in");
    c.wait().for_element(Locator::Css("nav")).await.expect("a page");
    c.goto(&format!("{}/ui/jobs?queue=q", s.url)).await.expect("goto");
    c.wait().for_element(Locator::Css(&format!("tr[data-job='{first}']"))).await.expect("the first job listed");
    // A mark on the page: it survives a live update and would not survive a reload.
    c.execute("window.convoyMark = 42; return null;", vec![]).await.expect("mark");
    let second = submit().await;
    let row = format!("tr[data-job='{second}']");
    // Well before the stream's periodic refresh (15 s): the submission itself must wake the page.
    let deadline = Instant::now() + Duration::from_secs(8);
    while c.find(Locator::Css(&row)).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the job submitted meanwhile never appeared: {}",
            c.source().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mark = c.execute("return window.convoyMark;", vec![]).await.expect("mark");
    assert_eq!(mark, json!(42), "the page was loaded again instead of updated in place");
    // Cancel the first job from its page: open the confirmation, then confirm.
    c.find(Locator::Css(&format!("a[href='/ui/jobs/{first}']"))).await.expect("link").click().await.expect("click");
    c.wait()
        .for_element(Locator::Css("details#cancel summary"))
        .await
        .expect("the cancel action")
        .click()
        .await
        .expect("open");
    c.find(Locator::Css("details#cancel button.danger")).await.expect("confirm").click().await.expect("confirm");
    let notice = c.wait().for_element(Locator::Css("p.notice")).await.expect("the outcome").text().await.expect("text");
    assert_eq!(notice, "cancelled");
    let state = c.find(Locator::Css("dd.state")).await.expect("state").text().await.expect("text");
    assert_eq!(state, "cancelled");
    let v: serde_json::Value =
        api(s.client.get(format!("{}/v1/jobs/{first}", s.url))).send().await.expect("get").json().await.expect("json");
    assert_eq!(v["state"], "cancelled");
    let v: serde_json::Value =
        api(s.client.get(format!("{}/v1/jobs/{second}", s.url))).send().await.expect("get").json().await.expect("json");
    assert_eq!(v["state"], "queued", "only the job clicked is cancelled");
    // Several at once from the table: tick them, open the confirmation, confirm.
    let third = submit().await;
    c.goto(&format!("{}/ui/jobs?queue=q", s.url)).await.expect("goto");
    for id in [&second, &third] {
        c.wait()
            .for_element(Locator::Css(&format!("input[name=job][value='{id}']")))
            .await
            .expect("a box to tick")
            .click()
            .await
            .expect("tick");
    }
    assert!(c.find(Locator::Css(&format!("input[name=job][value='{first}']"))).await.is_err(), "an ended job has none");
    c.find(Locator::Css("form.selection details summary")).await.expect("the action").click().await.expect("open");
    c.find(Locator::Css("form.selection button.danger")).await.expect("confirm").click().await.expect("confirm");
    let notice = c.wait().for_element(Locator::Css("p.notice")).await.expect("the outcome").text().await.expect("text");
    assert_eq!(notice, "2 jobs cancelled");
    for id in [&second, &third] {
        let v: serde_json::Value =
            api(s.client.get(format!("{}/v1/jobs/{id}", s.url))).send().await.expect("get").json().await.expect("json");
        assert_eq!(v["state"], "cancelled", "{v}");
    }
    // Who is signed in, and signing out, are on the navigation bar (signing out itself is
    // checked over HTTP: in this browser its redirect held the click for a minute).
    let who = c.find(Locator::Css("nav .user .who")).await.expect("on the bar").text().await.expect("text");
    assert_eq!(who, "Signed in as ops");
    c.find(Locator::Css("nav .user form[action='/ui/logout'] button")).await.expect("the sign-out button");
    c.close().await.expect("close the session");
}

/// The jobs table as people read it: coloured states, the last run's node, start, run time and
/// exit code, grouped by job set on request; memory in binary units; the queue page as a summary;
/// several jobs cancelled at once (none ticked is refused).
#[tokio::test]
async fn the_tables_read_as_people_expect_and_ticked_jobs_are_cancelled_together() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = admin_server(tmp.path()).await;
    let api = |req: reqwest::RequestBuilder| req.bearer_auth(TOKEN);
    let r = api(s.client.post(format!("{}/v1/queues", s.url))).json(&json!({"name": "q"})).send().await.expect("queue");
    assert_eq!(r.status().as_u16(), 201);
    let submit = |queue: &'static str, set: &'static str, n: usize| {
        let c = s.client.clone();
        let url = format!("{}/v1/jobs", s.url);
        async move {
            let r = c
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"queue": queue, "job_set": set, "jobs": (0..n).map(|_| job("1")).collect::<Vec<_>>()}))
                .send()
                .await
                .expect("submit");
            let v: serde_json::Value = r.json().await.expect("json");
            v["job_ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|i| i.as_str().expect("id").to_string())
                .collect::<Vec<_>>()
        }
    };
    let a = submit("q", "a", 2).await;
    let b = submit("q", "b", 1).await;
    let c2 = submit("q", "a", 1).await;
    // An executor with one node runs the first job: it fails with exit code 3.
    let node = json!({"name": "n1", "allocatable": {"cpu": "1", "memory": "24684084Ki"}});
    let leased = loop {
        let r = api(s.client.post(format!("{}/v1/executors/e1/lease", s.url)))
            .json(&json!({"nodes": [node], "runs": [], "wait_seconds": 1.0}))
            .send()
            .await
            .expect("poll");
        let v: serde_json::Value = r.json().await.expect("json");
        if let Some(l) = v["leases"].as_array().and_then(|l| l.first()) {
            break l.clone();
        }
    };
    let run = leased["run_id"].as_str().expect("run").to_string();
    let job_id = leased["job_id"].as_str().expect("job").to_string();
    let events = json!({"events": [
        {"run_id": run, "job_id": job_id, "kind": "running", "time_ms": 1_800_000_000_000i64},
        {"run_id": run, "job_id": job_id, "kind": "failed", "time_ms": 1_800_000_065_000i64, "exit_code": 3},
    ]});
    let r = api(s.client.post(format!("{}/v1/executors/e1/events", s.url))).json(&events).send().await.expect("events");
    assert_eq!(r.status().as_u16(), 200);
    let page = |path: String| {
        let c = s.client.clone();
        async move {
            let r = c.get(path).header("cookie", format!("convoy_token={TOKEN}")).send().await.expect("get");
            (r.status().as_u16(), r.text().await.expect("text"))
        }
    };
    let (_, html) = page(format!("{}/ui/jobs?queue=q", s.url)).await;
    assert!(html.contains("<th>Node</th><th>Started</th><th>Ran</th><th>Exit</th>"), "{html}");
    let row =
        html.split(&format!("<tr data-job=\"{job_id}\">")).nth(1).and_then(|r| r.split("</tr>").next()).unwrap_or("");
    assert!(row.contains("<td class=\"state failed\">failed</td>") && row.contains("<td>n1</td>"), "{row}");
    // Run time (the server's clock times the run), then the exit code.
    assert!(row.contains("s</td><td class=\"num\">3</td>") && row.contains("<td>n1</td><td>20"), "{row}");
    assert!(!row.contains("type=\"checkbox\""), "an ended job cannot be ticked: {row}");
    assert!(html.contains(&format!("name=\"job\" value=\"{}\"", b[0])), "{html}");
    assert!(html.contains("<span class=\"user\"><span class=\"who\">Signed in as ops</span>"), "{html}");
    // Grouped: job set a's rows together under their heading, then b's.
    let (_, html) = page(format!("{}/ui/jobs?queue=q&group=job_set", s.url)).await;
    let order: Vec<&str> = html
        .split("<tr ")
        .skip(1)
        .filter_map(|r| {
            if r.starts_with("class=\"group\"") {
                r.split("</a>").next().and_then(|x| x.rsplit("\">").next())
            } else {
                r.strip_prefix("data-job=\"").and_then(|x| x.split('"').next())
            }
        })
        .collect();
    let expected = vec!["q / a", c2[0].as_str(), a[1].as_str(), a[0].as_str(), "q / b", b[0].as_str()];
    assert_eq!(order, expected, "{html}");
    // Memory as people read it; the queue's page as a summary.
    let (_, html) = page(format!("{}/ui/nodes", s.url)).await;
    assert!(html.contains("cpu 1, memory 23.5 GiB"), "{html}");
    let (_, html) = page(format!("{}/ui/queues/q", s.url)).await;
    assert!(html.contains("<section class=\"summary settings\"><div><span class=\"label\">Weight</span>"), "{html}");
    assert!(
        html.contains("<span class=\"label\">queued</span><span class=\"value\"><a class=\"state queued\""),
        "{html}"
    );
    // Ticked jobs, cancelled together (across job sets); none ticked is refused.
    let http = no_redirects();
    let post = |form: String| {
        let (http, url) = (http.clone(), format!("{}/ui/jobs/cancel", s.url));
        async move {
            let r = http
                .post(url)
                .header("cookie", format!("convoy_token={TOKEN}"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .expect("post");
            let to = r.headers().get("location").and_then(|l| l.to_str().ok()).map(str::to_string);
            (r.status().as_u16(), to, r.text().await.expect("text"))
        }
    };
    let (st, to, _) = post(format!("job={}&job={}", a[1], b[0])).await;
    assert_eq!((st, to.as_deref()), (303, Some("/ui/jobs?notice=2%20jobs%20cancelled")));
    for (id, state) in [(&a[1], "cancelled"), (&b[0], "cancelled"), (&c2[0], "queued")] {
        let v: serde_json::Value =
            api(s.client.get(format!("{}/v1/jobs/{id}", s.url))).send().await.expect("get").json().await.expect("json");
        assert_eq!(v["state"], state, "{v}");
    }
    let (st, _, html) = post(String::new()).await;
    assert_eq!(st, 400);
    assert!(html.contains("tick the jobs to cancel"), "{html}");
}

/// The nodes page shows each node's allocation as bars and its labels, taints and cordon; the
/// cluster page the Raft members.
#[tokio::test]
async fn the_nodes_and_cluster_pages_show_allocation_and_members() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let s = Server::start_in(tmp.path(), &config(tmp.path(), ""));
    s.ready().await;
    s.create_queue("q").await;
    let nodes = [
        json!({"name": "gpu-1", "allocatable": {"cpu": "4", "memory": "16Gi"}, "labels": {"zone": "<a>"},
               "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}),
        json!({"name": "cpu-1", "allocatable": {"cpu": "4", "memory": "16Gi"}, "unschedulable": true}),
    ];
    s.poll("e1", &nodes, &[], 0.0).await;
    let page = |path: &str| {
        let (c, url) = (s.client.clone(), format!("{}{path}", s.url));
        async move { c.get(url).send().await.expect("get").text().await.expect("text") }
    };
    let html = page("/ui/nodes").await;
    assert!(html.contains("<h2>Executor e1</h2>") && html.contains("<tr data-node=\"gpu-1\">"), "{html}");
    assert!(html.contains("zone=&lt;a&gt;") && html.contains("dedicated=ml:NoSchedule"), "{html}");
    assert!(
        html.contains("<tr data-node=\"cpu-1\">") && html.contains("<span class=\"badge\">unschedulable</span>"),
        "{html}"
    );
    // A job of one core tolerating the taint lands on gpu-1: a quarter of its CPU.
    let mut j = job("1");
    j["pod_spec"]["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]);
    let id = &s.submit("q", "s", vec![j]).await[0];
    s.wait_job(id, Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;
    let html = page("/ui/nodes").await;
    let row = html.split("<tr data-node=\"gpu-1\">").nth(1).and_then(|r| r.split("</tr>").next()).unwrap_or("");
    assert!(row.contains("<rect class=\"cpu\" x=\"0\" y=\"0\" width=\"75\""), "{row}");
    assert!(row.contains("<td class=\"num\">1</td>"), "{row}");
    let html = page("/ui/cluster").await;
    assert!(html.contains("<tr data-member=\"1\"><td>1 (leader)</td>"), "{html}");
    assert!(html.contains("<dt>Leader</dt><dd>1 "), "{html}");
}

const ALICE: &str = "ui-alice-token-0123456789abcdef";
const BOB: &str = "ui-bob-token-0123456789abcdefgh";

/// Actions from the pages: offered to those allowed only, and refused to others by the server;
/// cancel, cancel of the job set and priority on a job, cordon on a queue (admins).
#[tokio::test]
async fn actions_are_offered_to_those_allowed_and_do_what_they_say() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let text = config(tmp.path(), "").replace(
        "[auth]\nenabled = false\n",
        &format!(
            "[auth]\nenabled = true\ntokens = [\n  {{ token = \"{TOKEN}\", principal = \"ops\", roles = [\"admin\"] }},\n  \
             {{ token = \"{ALICE}\", principal = \"alice\", roles = [\"submitter\"] }},\n  \
             {{ token = \"{BOB}\", principal = \"bob\", roles = [\"submitter\"] }},\n]\n"
        ),
    );
    let s = Server::start_in(tmp.path(), &text);
    s.ready().await;
    let admin = |req: reqwest::RequestBuilder| req.bearer_auth(TOKEN);
    let r = admin(s.client.post(format!("{}/v1/queues", s.url)))
        .json(&json!({"name": "q", "owners": ["alice"]}))
        .send()
        .await
        .expect("queue");
    assert_eq!(r.status().as_u16(), 201);
    let r = admin(s.client.post(format!("{}/v1/jobs", s.url)))
        .json(&json!({"queue": "q", "job_set": "s", "jobs": [job("1"), job("1"), job("1")]}))
        .send()
        .await
        .expect("submit");
    let ids: Vec<String> = r.json::<serde_json::Value>().await.expect("json")["job_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    assert_eq!(ids.len(), 3);
    let http = no_redirects();
    let cookie = |token: &str| format!("convoy_token={token}");
    let get = |path: String, token: &'static str| {
        let (http, url, c) = (http.clone(), format!("{}{path}", s.url), cookie(token));
        async move {
            let r = http.get(url).header("cookie", c).send().await.expect("get");
            (r.status().as_u16(), r.text().await.expect("text"))
        }
    };
    let post = |path: String, token: &'static str, form: &'static str| {
        let (http, url, c) = (http.clone(), format!("{}{path}", s.url), cookie(token));
        async move {
            let r = http
                .post(url)
                .header("cookie", c)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .expect("post");
            let location = r.headers().get("location").and_then(|l| l.to_str().ok()).map(str::to_string);
            (r.status().as_u16(), location, r.text().await.expect("text"))
        }
    };
    let state_of = |id: String| {
        let (c, url) = (s.client.clone(), format!("{}/v1/jobs/{id}", s.url));
        async move {
            c.get(url).bearer_auth(TOKEN).send().await.expect("get").json::<serde_json::Value>().await.expect("json")
        }
    };
    // Bob does not own q: no actions, and the server refuses them anyway.
    let (_, page) = get(format!("/ui/jobs/{}", ids[0]), BOB).await;
    assert!(!page.contains("<h2>Actions</h2>") && !page.contains("/cancel\""), "{page}");
    let (st, _, page) = post(format!("/ui/jobs/{}/cancel", ids[0]), BOB, "").await;
    assert_eq!(st, 403, "{page}");
    assert!(page.contains("role=\"alert\""), "{page}");
    let (_, page) = get("/ui/queues".into(), BOB).await;
    assert!(!page.contains("/cordon\""), "{page}");
    let (st, _, _) = post("/ui/queues/q/cordon".into(), BOB, "").await;
    assert_eq!(st, 403);
    // Alice owns it: the actions are there, each behind a confirmation.
    let (_, page) = get(format!("/ui/jobs/{}", ids[0]), ALICE).await;
    assert!(
        page.contains("<summary>Cancel this job…</summary>") && page.contains("Yes, cancel the job</button>"),
        "{page}"
    );
    let (st, to, _) = post(format!("/ui/jobs/{}/cancel", ids[0]), ALICE, "").await;
    assert_eq!((st, to.as_deref()), (303, Some(format!("/ui/jobs/{}?notice=cancelled", ids[0]).as_str())));
    assert_eq!(state_of(ids[0].clone()).await["state"], "cancelled");
    let (_, page) = get(format!("/ui/jobs/{}?notice=cancelled", ids[0]), ALICE).await;
    assert!(page.contains("<p class=\"notice\" role=\"status\">cancelled</p>"), "{page}");
    // Priority: a bad one is named, a good one is set.
    let (st, _, page) = post(format!("/ui/jobs/{}/priority", ids[1]), ALICE, "priority=soon").await;
    assert_eq!(st, 400);
    assert!(page.contains("priority: a whole number"), "{page}");
    let (st, _, _) = post(format!("/ui/jobs/{}/priority", ids[1]), ALICE, "priority=5").await;
    assert_eq!(st, 303);
    assert_eq!(state_of(ids[1].clone()).await["priority"], 5);
    // The job set: the two left.
    let (st, to, _) = post(format!("/ui/jobs/{}/cancel-set", ids[1]), ALICE, "").await;
    assert_eq!(st, 303);
    assert!(to.is_some_and(|t| t.contains("2%20jobs%20of%20job%20set%20s%20cancelled")));
    assert_eq!(state_of(ids[2].clone()).await["state"], "cancelled");
    // Cordon: admins only.
    let (_, page) = get("/ui/queues".into(), TOKEN).await;
    assert!(page.contains("action=\"/ui/queues/q/cordon\""), "{page}");
    let (st, to, _) = post("/ui/queues/q/cordon".into(), TOKEN, "").await;
    assert_eq!((st, to.as_deref()), (303, Some("/ui/queues?notice=queue%20q%20cordoned")));
    let (_, page) = get("/ui/queues".into(), TOKEN).await;
    assert!(
        page.contains("<span class=\"badge\">cordoned</span>") && page.contains("action=\"/ui/queues/q/uncordon\""),
        "{page}"
    );
}
