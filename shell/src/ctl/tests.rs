use super::*;

#[test]
fn outcomes_map_to_the_exit_codes_scripts_branch_on() {
    let t = |phase: &str, outcome: Option<&str>| {
        ticket_exit(&json!({ "phase": phase, "outcome": outcome }))
    };
    assert_eq!(t("DONE", Some("REPLIED")), Exit::Ok);
    assert_eq!(t("DONE", Some("COMPLETED_UNREPLIED")), Exit::Ok);
    assert_eq!(t("PENDING", None), Exit::Ok);
    assert_eq!(t("ASKING", None), Exit::Question);
    assert_eq!(t("FAILED", Some("TIMED_OUT_WORKING")), Exit::NoReply);
    assert_eq!(t("FAILED", Some("BUSY")), Exit::NoReply);
    let http = |status| {
        CtlError::Refused {
            status,
            code: String::new(),
            message: String::new(),
        }
        .exit()
    };
    assert_eq!(
        [http(400), http(401), http(403), http(404), http(503)],
        [
            Exit::Refused,
            Exit::Denied,
            Exit::Denied,
            Exit::NotFound,
            Exit::Refused
        ]
    );
}

#[test]
fn a_path_segment_is_escaped() {
    assert_eq!(seg("lead-1_a.b~"), "lead-1_a.b~");
    assert_eq!(seg("../x y"), "..%2Fx%20y");
    for dots in ["", ".", ".."] {
        assert_eq!(id(dots).map_err(|e| e.exit()).err(), Some(Exit::Usage));
    }
}
