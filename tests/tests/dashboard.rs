//! The operators' dashboard in a real browser: headless Chromium loads `/ui` from a running
//! fleetd (two gateways on RabbitMQ, members played from outside) and the rendered DOM must
//! show both hosts with their members' live status, a delegation in flight with its phase,
//! and a result held for the lead. A screenshot is kept under `target/ui-artifacts/`.
//! Compiled as ignored where no Chromium is installed (`.ci/run` installs Debian's).

use fleet_tests::fleetd_proc::{eventually, logs, start_host, stop_all, Dir, Host, Mcp, Rest};
use fleet_tests::webdriver::Browser;
use scraper::{Html, Selector};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Chromium the build found (`CHROMIUM`, or `chromium` / `chromium-browser` on `PATH`).
fn chromium() -> PathBuf {
    if let Some(c) = std::env::var_os("CHROMIUM").filter(|v| !v.is_empty()) {
        return PathBuf::from(c);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("built with a Chromium, run without one: apt-get install chromium")
        })
}

/// Runs headless Chromium on `url` with `args`, its own profile in `dir`, bounded; its stdout.
async fn browse(dir: &Path, url: &str, args: &[&str]) -> String {
    let profile = dir.join(format!("chromium-{}", args.len()));
    let mut cmd = tokio::process::Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        // Virtual time: the page's polling runs its course, paused while a fetch is out.
        "--virtual-time-budget=15000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(url)
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish within 90 s on {url}"))
        .unwrap_or_else(|e| panic!("starting chromium: {e}"));
    assert!(
        out.status.success(),
        "chromium {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The page as the browser rendered it.
async fn dom(dir: &Path, url: &str) -> Html {
    Html::parse_document(&browse(dir, url, &["--dump-dom"]).await)
}

fn select<'a>(doc: &'a Html, css: &str) -> Vec<scraper::ElementRef<'a>> {
    let s = Selector::parse(css).unwrap_or_else(|e| panic!("{css}: {e}"));
    doc.select(&s).collect()
}

fn attr<'a>(e: &scraper::ElementRef<'a>, name: &str) -> &'a str {
    e.value().attr(name).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(chromedriver),
    ignore = "needs Chromium and chromedriver: apt-get install chromium chromium-driver (.ci/run does)"
)]
async fn the_dashboard_shows_hosts_members_a_delegation_in_flight_and_a_held_result() {
    let dir = Dir::new("dashboard");
    let ns = format!("ui{}", std::process::id());
    let mut hosts: Vec<Host> = Vec::new();
    for i in 0..2 {
        hosts.push(start_host(&dir, &ns, i).await);
    }
    let scenario = async {
        let (alpha, beta) = (&hosts[0], &hosts[1]);
        let lead = Mcp::connect(&alpha.proc.url, Some(&alpha.token))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        eventually("beta's gateway in alpha's roster", 30, || async {
            let (_, v) = lead.call("fleet_list", json!({})).await;
            v["rows"].as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r["host"] == "beta" && r["kind"] == "gateway")
            })
        })
        .await;
        let spawn = |host: &'static str| {
            let lead = &lead;
            async move {
                let (ok, v) = lead
                    .call("fleet_spawn", json!({"profile": "echo", "host": host}))
                    .await;
                assert!(ok, "{v}");
                v["gid"].as_str().unwrap_or_default().to_string()
            }
        };
        let (far, near) = (spawn("beta").await, spawn("alpha").await);

        // In flight: a long brief to beta's member, typed there and still working.
        let (ok, t) = lead
            .call(
                "fleet_send",
                json!({"sessionId": far, "message": "SLOW 120000: a long build", "wait": false}),
            )
            .await;
        assert!(ok, "{t}");
        eventually("the brief is typed on beta", 30, || async {
            beta.herdr.member_typed(&far, "a long build").await == 1
        })
        .await;
        // Held: alpha's own member answers after its delegation timed out.
        let (_, out) = lead
            .call(
                "fleet_send",
                json!({"sessionId": near, "message": "SLOW 3000: quick check", "timeoutMs": 1500}),
            )
            .await;
        assert_eq!(out["outcome"], "TIMED_OUT_WORKING", "{out}");
        let rest = Rest::new(&alpha.proc.url, Some(&alpha.token));
        eventually("the late reply is held on alpha", 30, || async {
            let (_, o) = rest.get("/overview").await;
            o["held"].as_array().is_some_and(|h| !h.is_empty())
        })
        .await;
        eventually(
            "alpha hears beta's snapshot with its counts",
            30,
            || async {
                let (_, o) = rest.get("/overview").await;
                o["hosts"].as_array().is_some_and(|hs| {
                    hs.iter()
                        .any(|h| h["host"] == "beta" && h["ops"]["delegations"] == 1)
                })
            },
        )
        .await;

        let url = format!("{}/ui#token={}", alpha.proc.url, alpha.token);
        let me = rest.get("/overview").await.1["caller"].clone();
        assert_eq!(me["role"], "PRIMARY", "{me}");
        // Even a fresh tab asks before it acts with a link's token, and says whose it is;
        // nothing of the fleet is shown meanwhile.
        let asked = dom(&dir.0, &url).await;
        let offer = select(&asked, "#token-offer[data-offer=\"ask\"]:not([hidden])");
        assert_eq!(offer.len(), 1, "{}", asked.html());
        assert_eq!(
            (attr(&offer[0], "data-role"), attr(&offer[0], "data-name")),
            ("PRIMARY", me["name"].as_str().unwrap_or("?"))
        );
        assert!(
            select(&asked, "tr[data-gid]").is_empty(),
            "{}",
            asked.html()
        );
        // A link whose token the gateway refuses offers nothing to use.
        let bogus = dom(&dir.0, &format!("{}/ui#token=nobodys", alpha.proc.url)).await;
        assert_eq!(
            select(
                &bogus,
                "#token-offer[data-offer=\"refused\"] #token-use[hidden]"
            )
            .len(),
            1,
            "{}",
            bogus.html()
        );
        assert_eq!(attr(&select(&bogus, "#state")[0], "data-state"), "login");

        // The operator takes the link's token: the page shows the fleet, as that lead.
        let browser = Browser::start(&chromium(), &dir.0.join("webdriver-profile")).await;
        browser.goto(&url).await;
        browser
            .click_on("#token-offer:not([hidden]) #token-use", 20)
            .await;
        browser.find("#state[data-state=\"live\"]", 20).await;
        browser
            .find(
                &format!(".host[data-host=\"beta\"] tr[data-gid=\"{far}\"]"),
                20,
            )
            .await;
        browser.find("#held tbody tr", 20).await;
        let who = browser.find("#who", 5).await;
        assert_eq!(
            browser.attr(&who, "data-name").await,
            me["name"].as_str().unwrap_or("?")
        );
        let doc = Html::parse_document(&browser.source().await);
        let state = select(&doc, "#state");
        assert_eq!(attr(&state[0], "data-state"), "live", "{}", doc.html());
        // Both hosts, each with its link up, beta's counts as its snapshot said them.
        let boxes = select(&doc, ".host");
        let names: Vec<&str> = boxes.iter().map(|b| attr(b, "data-host")).collect();
        assert_eq!(names, ["alpha", "beta"], "{}", doc.html());
        assert!(boxes.iter().all(|b| attr(b, "data-link") == "UP"));
        // Each member under its own host, with its live status.
        let row = |host: &str, gid: &str| {
            select(
                &doc,
                &format!(".host[data-host=\"{host}\"] tr[data-gid=\"{gid}\"]"),
            )
            .first()
            .map(|r| {
                (
                    attr(r, "data-kind").to_string(),
                    attr(r, "data-status").to_string(),
                )
            })
        };
        assert_eq!(
            row("beta", &far),
            Some(("member".into(), "WORKING".into())),
            "{}",
            doc.html()
        );
        assert!(row("alpha", &near).is_some(), "{}", doc.html());
        assert!(row("beta", &near).is_none());
        // The delegation in flight, typed on beta, named by its flow.
        let flights = select(&doc, "#delegations tbody tr");
        let flight = flights
            .iter()
            .find(|r| attr(r, "data-target") == far)
            .unwrap_or_else(|| panic!("no delegation to {far}: {}", doc.html()));
        assert_eq!(attr(flight, "data-phase"), "TYPED");
        let flow = attr(flight, "data-flow").to_string();
        assert!(!flow.is_empty());
        // The held result, for alpha's lead.
        let held = select(&doc, "#held tbody tr");
        assert_eq!(held.len(), 1, "{}", doc.html());
        assert_eq!(
            (attr(&held[0], "data-target"), attr(&held[0], "data-count")),
            (near.as_str(), "1")
        );
        // A lead may act: the toggle is there (off: the page starts read-only).
        assert!(!select(&doc, "#actions-toggle:not([hidden])").is_empty());
        assert!(select(&doc, "button[data-action]").is_empty());

        // A flow link filters everything to that flow: its delegation and its members only.
        browser.goto(&format!("{url}&flow={flow}")).await;
        browser.find("#flow-filter:not([hidden])", 20).await;
        assert_eq!(browser.count("#token-offer:not([hidden])").await, 0);
        let filtered = Html::parse_document(&browser.source().await);
        let rows: Vec<String> = select(&filtered, "tr[data-gid]")
            .iter()
            .map(|r| attr(r, "data-gid").to_string())
            .collect();
        assert!(rows.contains(&far), "{rows:?}");
        assert!(!rows.contains(&near), "{rows:?}");
        assert!(select(&filtered, "#held tbody tr").is_empty());

        // Without a token the page asks for one and shows no fleet.
        let anon = dom(&dir.0, &format!("{}/ui", alpha.proc.url)).await;
        assert_eq!(attr(&select(&anon, "#state")[0], "data-state"), "login");
        assert!(select(&anon, "tr[data-gid]").is_empty());

        // The screenshot, for CI's artifacts and for a human.
        let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-artifacts");
        std::fs::create_dir_all(&shots).unwrap_or_else(|e| panic!("{e}"));
        let png = shots.join("dashboard.png");
        let _ = std::fs::remove_file(&png);
        browser.goto(&format!("{}/ui", alpha.proc.url)).await;
        browser
            .find(".host[data-host=\"beta\"] tr[data-gid]", 20)
            .await;
        browser.screenshot(&png).await;
        browser.quit().await;
        assert!(
            std::fs::metadata(&png).is_ok_and(|m| m.len() > 10_000),
            "{}",
            png.display()
        );
        lead.close().await;
    };
    let timed = tokio::time::timeout(Duration::from_secs(240), scenario).await;
    if timed.is_err() {
        panic!("the dashboard scenario did not finish\n{}", logs(&hosts));
    }
    stop_all(&mut hosts).await;
    // The hosts' own queues do not expire: leave the broker as it was found.
    fleet_tests::gateways::delete_namespace(&ns, &["alpha", "beta"], &["lead-alpha", "lead-beta"])
        .await;
}

/// Actions, clicked in a real browser: the page starts read-only; a lead who turns actions on
/// answers a member's open question from "Needs you", on top (the answer being typed survives
/// the page's refreshes), reviews a task of its list done from "Your tasks", and
/// stops a member (after a confirmation); an architect, who may answer but not stop, is
/// offered no stop button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(chromedriver),
    ignore = "needs Chromium and chromedriver: apt-get install chromium chromium-driver (.ci/run does)"
)]
async fn a_lead_answers_and_stops_from_the_dashboard_and_an_architect_is_offered_no_stop() {
    use fleet_tests::fleetd_proc::{start_solo, Solo, SOLO_ARCHITECT_TOKEN, SOLO_LEAD_TOKEN};
    let Solo {
        dir,
        herdr: _herdr,
        mut fleetd,
        members: _members,
    } = start_solo("dashboard-actions", 7).await;
    let rest = Rest::new(&fleetd.url, Some(SOLO_LEAD_TOKEN));
    let spawn = || async {
        let (code, v) = rest.post("/members", json!({"profile": "echo"})).await;
        assert_eq!(code, 200, "{v}");
        v["gid"].as_str().unwrap_or_default().to_string()
    };
    let (asker, other) = (spawn().await, spawn().await);
    let (code, t) = rest
        .post(
            &format!("/sessions/{asker}/message"),
            json!({"message": "ASK 60000: which branch?", "wait": false}),
        )
        .await;
    assert_eq!(code, 202, "{t}");
    let ticket = t["ticket"].as_str().unwrap_or_default().to_string();
    eventually("the member asks", 30, || async {
        rest.get(&format!("/tasks/{ticket}")).await.1["phase"] == "ASKING"
    })
    .await;

    let browser = Browser::start(&chromium(), &dir.0.join("webdriver-profile")).await;
    browser
        .goto(&format!("{}/ui#token={SOLO_LEAD_TOKEN}", fleetd.url))
        .await;
    browser
        .click_on(
            "#token-offer[data-role=\"PRIMARY\"]:not([hidden]) #token-use",
            20,
        )
        .await;
    browser.find("tr[data-phase=\"ASKING\"]", 20).await;
    // The question waits on this lead: it is on top, under "Needs you", with its words.
    browser
        .find(
            &format!(
                "main > section:first-child tr[data-kind=\"question\"][data-member=\"{asker}\"]"
            ),
            10,
        )
        .await;
    assert_eq!(browser.count("#needs .need-text").await, 1);
    assert_eq!(
        browser.count("button[data-action]").await,
        0,
        "read-only by default"
    );
    browser.click_on("#actions", 5).await;
    let input = browser.find("input[data-action=\"answer-text\"]", 10).await;
    browser.type_into(&input, "main").await;
    // Two refreshes later the draft is still there, in the redrawn field.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let input = browser.find("input[data-action=\"answer-text\"]", 5).await;
    assert_eq!(browser.value(&input).await, "main");
    browser.click_on("button[data-action=\"answer\"]", 5).await;
    eventually(
        "the answer reaches the member and its reply ends the ticket",
        30,
        || async {
            let v = rest.get(&format!("/tasks/{ticket}")).await.1;
            v["outcome"] == "REPLIED"
                && v["body"]
                    .as_str()
                    .is_some_and(|b| b.contains("answered: main"))
        },
    )
    .await;

    // The lead's task list: a task whose result waits in review is shown with its decisions;
    // "done" from the page is the lead's review.
    let (code, v) = rest
        .post(
            "/tasklist",
            json!({"title": "tidy", "brief": "tidy the branch", "assignee": other}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    browser
        .find("#tasks tr[data-task=\"1\"][data-state=\"review\"]", 30)
        .await;
    browser
        .click_on(
            "#tasks tr[data-task=\"1\"] button[data-action=\"review-done\"]",
            10,
        )
        .await;
    eventually("the task is reviewed done", 20, || async {
        rest.get("/tasklist/1").await.1["tasks"][0]["state"] == "done"
    })
    .await;
    browser
        .find("#tasks tr[data-task=\"1\"][data-state=\"done\"]", 10)
        .await;

    browser
        .click_on(
            &format!("tr[data-gid=\"{other}\"] button[data-action=\"stop\"]"),
            10,
        )
        .await;
    let asked = browser.accept_dialog().await;
    assert!(asked.contains(&other), "{asked}");
    eventually("the member is stopped", 30, || async {
        rest.get(&format!("/sessions/{other}/status")).await.0 == 404
    })
    .await;

    // A link carrying another token does not quietly replace the one the tab acts with: the
    // page asks the gateway whose it is (here: nobody's, refused), offers nothing to use, and
    // "keep mine" leaves it acting as before.
    browser
        .goto(&format!("{}/ui?from=mail#token=someone-elses", fleetd.url))
        .await;
    browser
        .find(
            "#token-offer[data-offer=\"refused\"] #token-use[hidden]",
            10,
        )
        .await;
    browser
        .click_on("#token-offer:not([hidden]) #token-keep", 10)
        .await;
    browser.find("#state[data-state=\"live\"]", 20).await;
    browser.find(&format!("tr[data-gid=\"{asker}\"]"), 20).await;
    assert_eq!(browser.count("#login:not([hidden])").await, 0);

    // An architect may answer, not stop: the switch is there, and with it on no stop button.
    browser
        .goto(&format!(
            "{}/ui?as=architect#token={SOLO_ARCHITECT_TOKEN}",
            fleetd.url
        ))
        .await;
    browser
        .find(
            "#token-offer[data-offer=\"ask\"][data-role=\"ARCHITECT\"]:not([hidden])",
            10,
        )
        .await;
    browser
        .click_on("#token-offer:not([hidden]) #token-use", 10)
        .await;
    browser.find("#who[data-role=\"ARCHITECT\"]", 20).await;
    browser.find(&format!("tr[data-gid=\"{asker}\"]"), 20).await;
    browser.click_on("#actions", 5).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(browser.count("button[data-action=\"stop\"]").await, 0);
    browser.quit().await;
    let s = fleetd.term(Duration::from_secs(20)).await;
    assert!(s.is_ok_and(|s| s.success()), "{}", fleetd.log_text());
}
