use super::*;

#[test]
fn a_config_that_names_a_command_is_planted() {
    for key in [
        "filter.lfs.smudge=git-lfs smudge %f",
        "filter.x.process=evil",
        "diff.pdf.textconv=evil",
        "merge.ours.driver=evil",
        "remote.origin.uploadpack=evil",
        "remote.origin.vcs=evil",
        "core.gitProxy=evil",
        "core.askPass=evil",
        "core.worktree=/elsewhere",
        "include.path=/tmp/x",
        "includeIf.gitdir:/x/.path=/tmp/x",
        "credential.https://example.com.helper=evil",
        "extensions.worktreeConfig=true",
        "protocol.ext.allow=always",
        "protocol.allow=always",
    ] {
        assert!(planted(key).is_some(), "{key}");
    }
    let clean = "core.repositoryformatversion=0\ncore.bare=false\n\
                     remote.origin.url=https://example.com/r.git\n\
                     remote.origin.fetch=+refs/heads/*:refs/remotes/origin/*\n\
                     branch.main.remote=origin\ncore.hookspath=.husky\ncore.fsmonitor=true\n\
                     core.sshcommand=evil\ncredential.helper=store\nfilter.lfs.required=true";
    // What fleetd overrides on its command line (hooks, fsmonitor, ssh, helper) is not a
    // reason to refuse a repository; nor is a filter with no program.
    assert_eq!(planted(clean), None);
}

#[test]
fn a_urls_transport_is_named_as_protocol_allow_names_it() {
    assert_eq!(transport("https://example.com/r.git"), "https");
    assert_eq!(transport("SSH://example.com/r.git"), "ssh");
    assert_eq!(transport("git+ssh://example.com/r.git"), "ssh");
    assert_eq!(transport("git@example.com:r.git"), "ssh");
    assert_eq!(transport("file:///srv/r"), "file");
    assert_eq!(transport("git://example.com/r"), "git");
}
