use super::*;

fn errors(text: &str) -> Vec<String> {
    match Config::parse(text, "t.toml") {
        Ok(_) => Vec::new(),
        Err(es) => es.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn an_empty_file_is_a_single_host_gateway_on_loopback() {
    let c = Config::parse("", "t.toml").expect("valid");
    assert!(c.broker.is_none());
    assert_eq!(c.gateway.listen, "127.0.0.1:8765");
    assert_eq!(c.mcp_url(), "http://127.0.0.1:8765/mcp");
}

#[test]
fn the_example_is_valid() {
    std::env::set_var("FLEETD_TOKEN", "0123456789abcdef0123");
    let c = Config::parse(EXAMPLE, "example").expect("valid");
    assert_eq!(c.core_config().profiles, vec!["echo".to_string()]);
}

#[test]
fn health_knobs_and_a_profiles_fatal_patterns_reach_the_core_and_are_checked() {
    let text = "[health]\ninterval_ms = 2000\nmute_after_turns = 3\n\n\
                    [profiles.echo]\nkind = \"command\"\nargv = [\"cat\"]\n\
                    fatal_patterns = [\"(?i)segmentation fault\"]\n";
    let c = Config::parse(text, "t.toml").expect("valid");
    let core = c.core_config();
    assert_eq!(
        (core.health.interval_ms, core.health.mute_after_turns),
        (2000, 3)
    );
    assert_eq!(
        core.health.profile_fatal_patterns.get("echo"),
        Some(&vec!["(?i)segmentation fault".to_string()])
    );
    let e = errors("[health]\ninterval_ms = 0\n");
    assert!(e.iter().any(|e| e.contains("health.interval_ms")), "{e:?}");
    let e =
        errors("[profiles.echo]\nkind = \"command\"\nargv = [\"cat\"]\nfatal_patterns = [\"(\"]\n");
    assert!(e.iter().any(|e| e.contains("fatal_patterns")), "{e:?}");
}

#[test]
fn an_unknown_key_is_named_with_its_path() {
    let e = errors("[core]\npoll_intervall_ms = 3\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("`core.poll_intervall_ms`"), "{e:?}");
    let e = errors("[gateway]\nlisten = 5\n");
    assert!(e[0].contains("`gateway.listen`"), "{e:?}");
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let e = errors(
        "[gateway]\nhost = \"a b\"\nlisten = \"nowhere\"\n[peers]\nb = \"xyz\"\n\
             [[leads]]\nname = \"x\"\ntoken = \"short\"\n[core]\npresence_ttl_ms = 1\n",
    );
    let keys = [
        "gateway.host",
        "gateway.listen",
        "core",
        "peers",
        "peers.b",
        "leads[0].token",
    ];
    for k in keys {
        assert!(
            e.iter().any(|m| m.starts_with(&format!("`{k}`"))),
            "{k}: {e:?}"
        );
    }
}

#[test]
fn a_cluster_is_a_list_of_uris_and_a_queue_type() {
    let text = "[broker]\nuris = [\"amqp://a:p@n1:5672/%2f\", \"amqp://a:p@n2:5672/%2f\"]\n\
                    queue_type = \"quorum\"\n";
    let c = Config::parse(text, "t.toml").expect("valid");
    assert_eq!(c.broker_uris().map(|u| u.len()), Some(2));
    assert_eq!(
        c.broker.as_ref().map(|b| b.queue_type),
        Some(QueueType::Quorum)
    );
    let one = Config::parse("[broker]\n", "t.toml").expect("valid");
    assert_eq!(
        one.broker.as_ref().map(|b| b.queue_type),
        Some(QueueType::Classic),
        "classic unless asked"
    );
    let both = "[broker]\nuri = \"amqp://n1\"\nuris = [\"amqp://n2\"]\n";
    assert!(errors(both).iter().any(|e| e.starts_with("`broker.uris`")));
    let bad = "[broker]\nuris = [\"amqp://n1\", \"http://n2\"]\n";
    assert!(errors(bad)
        .iter()
        .any(|e| e.starts_with("`broker.uris[1]`")));
    let e = errors("[broker]\nqueue_type = \"mirrored\"\n");
    assert!(e[0].contains("mirrored"), "{e:?}");
}

#[test]
fn a_cluster_from_the_environment_is_comma_separated() {
    std::env::set_var(
        "FLEETD_TEST_CLUSTER_URIS",
        "amqp://a:p@n1/%2f, amqp://a:p@n2/%2f,amqp://a:p@n3/%2f",
    );
    let c = Config::parse(
        "[broker]\nuri_env = \"FLEETD_TEST_CLUSTER_URIS\"\n",
        "t.toml",
    )
    .expect("valid");
    assert_eq!(
        c.broker_uris(),
        Some(vec![
            "amqp://a:p@n1/%2f".to_string(),
            "amqp://a:p@n2/%2f".into(),
            "amqp://a:p@n3/%2f".into()
        ])
    );
}

#[test]
fn a_claude_profile_must_pass_the_subscription_guard() {
    let e = errors("[profiles.c]\nkind = \"claude-code\"\nbase_url = \"https://api.example\"\n");
    assert!(e[0].starts_with("`profiles.c.base_url`"), "{e:?}");
    let ok = "[herdr]\nbase_url_allow = [\"https://api.example\"]\n\
                  [profiles.c]\nkind = \"claude-code\"\nbase_url = \"https://api.example\"\n";
    assert!(errors(ok).is_empty());
}

#[test]
fn settings_that_would_fail_later_are_refused_now() {
    let two_leads = "[[leads]]\nname = \"a\"\ntoken = \"same-token-0123456789\"\n\
                         [[leads]]\nname = \"b\"\ntoken = \"same-token-0123456789\"\n";
    assert!(errors(two_leads)[0].starts_with("`leads[1].token`"));
    let e = errors("[gateway]\nallowed_hosts = []\n");
    assert!(e[0].starts_with("`gateway.allowed_hosts`"), "{e:?}");
    let e = errors("[gateway]\nlisten = \"0.0.0.0:8765\"\n");
    assert!(
        e[0].contains("0.0.0.0:8765"),
        "members' URL not allowed: {e:?}"
    );
    let e = errors("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    assert!(e[0].starts_with("`gateway.listen`"), "{e:?}");
    let e = errors(
        "[gateway]\nloopback_lead = \"me\"\n[[leads]]\nname = \"me\"\n\
             [profiles.sh]\nkind = \"command\"\nargv = [\"bash\"]\n",
    );
    assert!(e[0].starts_with("`gateway.loopback_lead`"), "{e:?}");
    let e = errors("[log]\nlevel = \"fleetd=loud\"\n");
    assert!(e[0].starts_with("`log.level`"), "{e:?}");
    // The start gate's bound comes from herdr's section, and fits in the spawn's.
    let e = errors("[core]\nstart_timeout_ms = 5000\n");
    assert!(e[0].starts_with("`core.start_timeout_ms`"), "{e:?}");
    let e = errors("[herdr]\nready_timeout_ms = 90000\n[core]\nspawn_ready_timeout_ms = 60000\n");
    assert!(e[0].starts_with("`herdr.ready_timeout_ms`"), "{e:?}");
}

#[test]
fn keys_round_trip_through_hex() {
    let k = [0xab; 32];
    assert_eq!(decode_key(&encode_key(&k)), Some(k));
    assert_eq!(decode_key("zz"), None);
}

#[test]
fn notify_rules_reach_the_core_and_every_problem_is_named() {
    let secret = std::env::temp_dir().join(format!("fleetd-cfg-notify-{}", std::process::id()));
    std::fs::write(&secret, "k\n").expect("a temp file");
    let text = format!(
        "[[leads]]\nname = \"alice\"\ngid = \"alice-pane\"\ntoken = \"0123456789abcdef0123\"\n\n\
         [[notify]]\nname = \"ops\"\nsink = \"webhook\"\nurl = \"https://hooks.example.com/f\"\n\
         secret_file = \"{}\"\non = [\"question\", \"broker_down\"]\nleads = [\"alice\"]\n\
         grace_ms = 5000\n",
        secret.display()
    );
    let c = Config::parse(&text, "t.toml").expect("valid");
    let rules = c.core_config().notify;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].leads, [fleet_core::SessionId::new("alice-pane")]);
    assert_eq!(rules[0].grace_ms, 5000);

    let e = errors(
        "[[notify]]\nname = \"a\"\nsink = \"webhook\"\nurl = \"ftp://x\"\nleads = [\"bob\"]\n\
         quiet_ms = 0\n\n[[notify]]\nname = \"a\"\nsink = \"command\"\n",
    );
    for want in [
        "notify[0].url",
        "notify[0].secret_file",
        "notify[0].leads",
        "notify[1].argv",
        "quiet_ms",
    ] {
        assert!(e.iter().any(|e| e.contains(want)), "{want}: {e:?}");
    }
    let e =
        errors("[[notify]]\nname = \"a\"\nsink = \"command\"\nargv = [\"x\"]\non = [\"coffee\"]\n");
    assert!(
        e.iter().any(|e| e.contains("coffee")),
        "an unknown kind is named: {e:?}"
    );
}
