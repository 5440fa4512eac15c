use super::*;

fn cfg() -> LaunchConfig {
    let mut c = LaunchConfig::new("/run/fleetd/members", "http://127.0.0.1:7700/mcp", [7; 32]);
    c.base_url_allow = vec!["https://llm.internal.example/v1".into()];
    c
}

fn parent() -> BTreeMap<String, String> {
    [
        ("PATH", "/usr/bin"),
        ("HOME", "/home/dev"),
        ("LC_ALL", "C.UTF-8"),
        ("ANTHROPIC_API_KEY", "sk-secret"),
        ("GITHUB_TOKEN", "ghp_secret"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn claude(base_url: &str) -> Profile {
    Profile {
        kind: Kind::ClaudeCode {
            bin: "claude".into(),
            base_url: base_url.into(),
            model: Some("sonnet".into()),
            args: vec![],
        },
        env: BTreeMap::new(),
        cwd: Some("/src/app".into()),
        charter: Some("You are a fleet member. Reply with fleet_reply.".into()),
        sandbox: true,
        network: Network::Host,
        sandbox_paths: Vec::new(),
        config_template: None,
        reports: true,
    }
}

#[test]
fn a_claude_code_member_runs_off_subscription_with_its_own_mcp_and_a_scrubbed_env() {
    let member = Member {
        group: Some("qa"),
        ..Member::new("g1", "0011aabb")
    };
    let l = plan(
        &cfg(),
        "dev",
        &claude("https://llm.internal.example/v1"),
        member,
        &parent(),
    )
    .expect("planned");
    let env = &l.env;
    assert_eq!(env["ANTHROPIC_BASE_URL"], "https://llm.internal.example/v1");
    assert_eq!(env["FLEET_GID"], "g1");
    assert_eq!(env["FLEET_GROUP"], "qa");
    assert_eq!(env["PATH"], "/usr/bin");
    assert_eq!(env["LC_ALL"], "C.UTF-8");
    assert!(!env.contains_key("ANTHROPIC_API_KEY") && !env.contains_key("GITHUB_TOKEN"));
    assert_eq!(
        &l.program[..5],
        [
            "claude",
            "--mcp-config",
            "/run/fleetd/members/g1/mcp.json",
            "--strict-mcp-config",
            "--model"
        ]
    );
    assert_eq!(
        l.gate,
        fleet_core::Readiness::OnPrompt(fleet_core::agent_screen::StartRules::ClaudeCode)
    );
    let (_, text) = l
        .files
        .iter()
        .find(|(p, _)| p == Path::new("/run/fleetd/members/g1/mcp.json"))
        .expect("mcp.json");
    let v: serde_json::Value = serde_json::from_str(text).expect("json");
    let secret = member_secret(&[7; 32], "g1", "0011aabb");
    assert_eq!(
        v["mcpServers"]["fleet"]["headers"]["Authorization"],
        format!("Bearer g1.0011aabb.{secret}")
    );
    assert_eq!(v["mcpServers"]["fleet"]["url"], "http://127.0.0.1:7700/mcp");
    // The secret is in the 0600 file, never in the pane's argv.
    assert!(l.argv().iter().all(|a| !a.contains(&secret)));
    let receipt = l.receipt.expect("a receipt");
    assert_eq!(receipt.bytes, 47);
    assert_eq!(receipt.sha256.len(), 64);
}

#[test]
fn the_subscription_guard_refuses_a_base_url_off_the_allow_list() {
    let e = plan(
        &cfg(),
        "dev",
        &claude("https://api.anthropic.com"),
        Member::new("g1", "00"),
        &parent(),
    )
    .expect_err("refused");
    assert!(matches!(e, LaunchError::SubscriptionGuard { .. }), "{e}");
    assert!(e.to_string().contains("api.anthropic.com"), "{e}");
}

#[test]
fn an_opencode_member_gets_an_ephemeral_config_with_the_charter_as_instructions() {
    let p = Profile {
        kind: Kind::OpenCode {
            bin: "opencode".into(),
            model: Some("anthropic/claude-sonnet-4".into()),
            base_url: None,
            args: vec![],
        },
        env: [("OPENCODE_DISABLE_AUTOUPDATE".to_string(), "1".to_string())].into(),
        cwd: None,
        charter: Some("charter".into()),
        sandbox: true,
        network: Network::Host,
        sandbox_paths: Vec::new(),
        config_template: None,
        reports: true,
    };
    let l = plan(&cfg(), "oc", &p, Member::new("g2", "00"), &parent()).expect("planned");
    let env = &l.env;
    assert_eq!(
        env["OPENCODE_CONFIG"],
        "/run/fleetd/members/g2/opencode.json"
    );
    assert_eq!(env["OPENCODE_DISABLE_AUTOUPDATE"], "1");
    assert_eq!(l.program, ["opencode", "-m", "anthropic/claude-sonnet-4"]);
    let config = &l
        .files
        .iter()
        .find(|(p, _)| p.ends_with("opencode.json"))
        .expect("config")
        .1;
    let v: serde_json::Value = serde_json::from_str(config).expect("json");
    assert_eq!(v["mcp"]["fleet"]["type"], "remote");
    assert_eq!(v["instructions"][0], "/run/fleetd/members/g2/charter.md");
    assert!(l
        .files
        .iter()
        .any(|(p, t)| p.ends_with("charter.md") && t == "charter"));
    assert_eq!(v["permission"]["fleet_*"], "allow");
    assert_eq!(v["autoupdate"], false);
    assert_eq!(env["OPENCODE_DISABLE_MODELS_FETCH"], "1");
}

/// With a base_url, its provider is fleetd's — on the allow-list, or the spawn is refused.
#[test]
fn an_opencode_member_with_a_base_url_uses_it_and_only_an_allowed_one() {
    let p = |base: &str| Profile {
        kind: Kind::OpenCode {
            bin: "opencode".into(),
            model: Some("gpt-5".into()),
            base_url: Some(base.into()),
            args: vec![],
        },
        env: BTreeMap::new(),
        cwd: None,
        charter: None,
        sandbox: true,
        network: Network::Host,
        sandbox_paths: Vec::new(),
        config_template: None,
        reports: true,
    };
    let l = plan(
        &cfg(),
        "oc",
        &p("https://llm.internal.example/v1"),
        Member::new("g2", "00"),
        &parent(),
    )
    .expect("planned");
    assert_eq!(l.program, ["opencode", "-m", "fleet/gpt-5"]);
    let config = &l
        .files
        .iter()
        .find(|(p, _)| p.ends_with("opencode.json"))
        .expect("config")
        .1;
    let v: serde_json::Value = serde_json::from_str(config).expect("json");
    let provider = &v["provider"]["fleet"];
    assert_eq!(
        provider["options"]["baseURL"],
        "https://llm.internal.example/v1"
    );
    assert_eq!(provider["options"]["apiKey"], "{env:OPENAI_API_KEY}");
    assert_eq!(provider["npm"], "@ai-sdk/openai-compatible");
    let refused = plan(
        &cfg(),
        "oc",
        &p("https://api.openai.com/v1"),
        Member::new("g2", "00"),
        &parent(),
    );
    assert!(matches!(
        refused,
        Err(LaunchError::SubscriptionGuard { .. })
    ));
}

#[test]
fn a_command_member_is_gated_on_an_injectable_status() {
    let l = plan(
        &cfg(),
        "sh",
        &Profile::command(&["sh", "-c", "agent"]),
        Member::new("g3", "00"),
        &parent(),
    )
    .expect("planned");
    assert_eq!(l.gate, fleet_core::Readiness::OnInjectable);
    assert_eq!(l.env["FLEET_MCP_URL"], "http://127.0.0.1:7700/mcp");
    assert_eq!(l.env["FLEET_MCP_TOKEN"], member_token(&[7; 32], "g3", "00"));
    assert_eq!(
        l.env["HERDR_SOCKET_PATH"],
        "/run/fleetd/members/g3/herdr.sock"
    );
    // An offline sandbox reaches the gateway through its relay; its home is its own.
    let offline = Member {
        boxed: Some(Network::None),
        ..Member::new("g3", "00")
    };
    let l = plan(&cfg(), "sh", &Profile::command(&["a"]), offline, &parent()).expect("planned");
    assert_eq!(l.env["FLEET_MCP_URL"], "http://127.0.0.1:7700/mcp");
    assert_eq!(l.env["HOME"], "/run/fleetd/members/g3/home");
    let e = plan(
        &cfg(),
        "sh",
        &Profile::command(&[]),
        Member::new("g3", "00"),
        &parent(),
    )
    .expect_err("empty");
    assert!(e.to_string().contains("argv"), "{e}");
}

/// The argv really runs: `sh` keeps herdr's pane variables, `env -i` drops everything
/// else, the script exports values with spaces, quotes and `$` literally and removes
/// itself, and neither the token nor any value is in the pane's argv.
#[test]
fn the_argv_runs_with_exactly_the_planned_environment() {
    let dir = std::env::temp_dir().join(format!("fleetd-launch-{}", std::process::id()));
    let mut c = cfg();
    c.runtime_dir = dir.clone();
    let mut p = Profile::command(&["sh", "-c", "env | sort"]);
    p.env
        .insert("ODD".into(), "a b 'c' \"d\" $HOME `x`\nline".into());
    let l = plan(&c, "sh", &p, Member::new("g4", "0a"), &parent()).expect("planned");
    let argv = l.argv();
    assert!(argv
        .iter()
        .all(|a| !a.contains("FLEET_MCP_TOKEN") && !a.contains("ODD")));
    write_files(&dir.join("g4"), &l.all_files()).expect("written");
    let child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("HERDR_PANE_ID", "w1:p7")
        .env("AWS_SECRET_ACCESS_KEY", "leak")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sh runs");
    // The program ended: its status is recorded, and the pane kept until fleetd reads it.
    let exited = dir.join("g4").join(EXITED_FILE);
    for _ in 0..500 {
        if exited.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        std::fs::read_to_string(&exited).ok().as_deref(),
        Some("0\n")
    );
    std::fs::remove_file(&exited).expect("fleetd's read");
    let out = child.wait_with_output().expect("the script ends once read");
    let text = String::from_utf8_lossy(&out.stdout);
    let got: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(got["ODD"], "a b 'c' \"d\" $HOME `x`");
    assert!(
        text.lines().any(|l| l == "line"),
        "the newline kept: {text}"
    );
    assert_eq!(got["HERDR_PANE_ID"], "w1:p7");
    assert_eq!(got["FLEET_GID"], "g4");
    assert_eq!(got["FLEET_MCP_TOKEN"], member_token(&[7; 32], "g4", "0a"));
    assert!(!got.contains_key("AWS_SECRET_ACCESS_KEY"), "{text}");
    assert!(!got.contains_key("ANTHROPIC_API_KEY"), "{text}");
    assert!(!l.script.exists(), "the script removed itself");
    let _ = std::fs::remove_dir_all(&dir);
    let e = plan(
        &cfg(),
        "sh",
        &Profile::command(&["A=1", "x"]),
        Member::new("g4", "0a"),
        &parent(),
    );
    assert!(e.is_err(), "a program named like a variable is refused");
}

#[test]
fn member_secrets_are_per_gid_and_spawn_stable_and_checked() {
    let k = [9u8; 32];
    let s = member_secret(&k, "a", "01");
    assert_eq!(s, member_secret(&k, "a", "01"));
    assert_ne!(s, member_secret(&k, "b", "01"));
    assert_ne!(s, member_secret(&k, "a", "02"));
    assert!(verify_member(&k, "a", "01", &s));
    assert!(!verify_member(&k, "b", "01", &s));
    assert!(!verify_member(&k, "a", "02", &s));
    assert!(!verify_member(&k, "a", "01", "zz"));
    assert!(!verify_member(&[8u8; 32], "a", "01", &s));
    assert_eq!(fresh_nonce().len(), 16);
    assert_ne!(fresh_nonce(), fresh_nonce());
}

#[test]
fn a_token_is_live_only_while_its_nonce_is_on_record() {
    let dir = std::env::temp_dir().join(format!("fleetd-tokens-{}", std::process::id()));
    write_files(
        &dir.join("g5"),
        &[(dir.join("g5").join(NONCE_FILE), "0c".into())],
    )
    .expect("written");
    let t = MemberTokens::load(&dir);
    assert!(t.current("g5", "0c"));
    assert!(!t.current("g5", "0d"), "another spawn's nonce");
    assert_eq!(
        token_on_record(&dir, &[1; 32], "g5"),
        Some(member_token(&[1; 32], "g5", "0c"))
    );
    t.revoke("g5");
    assert!(!t.current("g5", "0c"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_urls_port_and_path_are_read_with_their_defaults() {
    assert_eq!(
        url_port_path("http://127.0.0.1:7700/mcp"),
        (7700, "/mcp".into())
    );
    assert_eq!(url_port_path("https://a.example/mcp"), (443, "/mcp".into()));
    assert_eq!(url_port_path("http://[::1]:9000/x"), (9000, "/x".into()));
    assert_eq!(url_port_path("http://host"), (80, "/".into()));
}

#[test]
fn the_allow_list_reads_prefixes() {
    let allow = vec!["LC_*".to_string(), "PATH".to_string()];
    assert!(allowed(&allow, "LC_CTYPE"));
    assert!(allowed(&allow, "PATH"));
    assert!(!allowed(&allow, "PATHX"));
    assert!(!allowed(&allow, "AWS_SECRET_ACCESS_KEY"));
}

/// With fleetd's binary known, a claude-code member's hooks and a codex member's notify
/// program report their turns through `fleetd member-report`, to the member's own gateway with
/// its own token — in the 0600 script's environment, never on argv; in a sandbox, through the
/// binary bound at `RELAY_BIN`.
#[test]
fn an_agents_own_reports_are_installed_with_its_own_credential() {
    let mut c = cfg();
    c.report_bin = Some(PathBuf::from("/usr/local/bin/fleetd"));
    let boxed = Member {
        boxed: Some(Network::Host),
        ..Member::new("g1", "0011aabb")
    };
    let mut l = plan(
        &c,
        "dev",
        &claude("https://llm.internal.example/v1"),
        boxed,
        &parent(),
    )
    .expect("planned");
    let secret = member_secret(&[7; 32], "g1", "0011aabb");
    assert_eq!(l.env["FLEET_MCP_URL"], "http://127.0.0.1:7700/mcp");
    assert_eq!(l.env["FLEET_MCP_TOKEN"], format!("g1.0011aabb.{secret}"));
    assert!(l.argv().iter().all(|a| !a.contains(&secret)));
    assert!(l.reports);
    l.prepare_agent(None).expect("prepared");
    let (_, settings) = l
        .files
        .iter()
        .find(|(p, _)| p.ends_with("claude/settings.json"))
        .expect("settings.json");
    let v: serde_json::Value = serde_json::from_str(settings).expect("json");
    for event in crate::herdr::agent_config::CLAUDE_REPORTED_HOOKS {
        let command = v["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .unwrap_or_else(|| panic!("no {event} hook: {v}"));
        assert_eq!(
            command,
            "'/run/fleetd/fleetd' member-report --agent claude-code --seq '/run/fleetd/members/g1/claude/.fleet-report-seq'"
        );
    }
    // Unsandboxed, the daemon's own path; and a codex member's notify program.
    let codex = Profile {
        kind: Kind::Codex {
            bin: "codex".into(),
            base_url: "https://llm.internal.example/v1".into(),
            model: None,
            args: vec![],
        },
        ..claude("https://llm.internal.example/v1")
    };
    let mut l = plan(&c, "cx", &codex, Member::new("g2", "00ff"), &parent()).expect("planned");
    l.prepare_agent(None).expect("prepared");
    let (_, config) = l
        .files
        .iter()
        .find(|(p, _)| p.ends_with("codex/config.toml"))
        .expect("config.toml");
    let t: toml::Table = config.parse().expect("toml");
    let notify: Vec<&str> = t["notify"]
        .as_array()
        .expect("notify")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        notify,
        [
            "/usr/local/bin/fleetd",
            "member-report",
            "--agent",
            "codex",
            "--seq",
            "/run/fleetd/members/g2/codex/.fleet-report-seq"
        ]
    );
    // Without fleetd's binary (a launcher in a test), nothing reports: the screen is read.
    let l = plan(&cfg(), "cx", &codex, Member::new("g3", "00ff"), &parent()).expect("planned");
    assert!(!l.reports);
    assert!(!l.env.contains_key("FLEET_MCP_URL"));
}

/// An opencode member reports through fleetd's plugin, named by path in its config with the
/// reporter's paths written in as JSON strings; `reports = false` installs nothing.
#[test]
fn an_opencode_member_reports_through_its_plugin_unless_told_not_to() {
    let mut c = cfg();
    c.report_bin = Some(PathBuf::from("/usr/local/bin/fleetd"));
    let opencode = Profile {
        kind: Kind::OpenCode {
            bin: "opencode".into(),
            model: None,
            base_url: None,
            args: vec![],
        },
        ..claude("https://llm.internal.example/v1")
    };
    let boxed = Member {
        boxed: Some(Network::Host),
        ..Member::new("g4", "00aa")
    };
    let l = plan(&c, "oc", &opencode, boxed, &parent()).expect("planned");
    assert!(l.reports);
    let file = |name: &str| {
        l.files
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let config: serde_json::Value = serde_json::from_str(&file("opencode.json")).expect("json");
    assert_eq!(
        config["plugin"],
        serde_json::json!(["/run/fleetd/members/g4/fleet-report.js"])
    );
    let js = file("fleet-report.js");
    assert!(
        js.contains(r#"const REPORT_BIN = "/run/fleetd/fleetd", SEQ_FILE = "/run/fleetd/members/g4/home/.fleet-report-seq";"#),
        "{js}"
    );
    // In its own home, the plugin's dependency is marked present: no npm install first.
    assert!(file(".config/opencode/package-lock.json").contains("@opencode-ai/plugin"));
    let off = Profile {
        reports: false,
        ..opencode
    };
    let l = plan(&c, "oc", &off, Member::new("g5", "00aa"), &parent()).expect("planned");
    assert!(!l.reports);
    assert!(l.files.iter().all(|(p, _)| !p.ends_with("fleet-report.js")));
}
