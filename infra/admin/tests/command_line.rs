//! The built `admin` binary: help on standard output with status 0, a command line that does
//! not fit on standard error with status 2; neither needs AWS.

use std::process::{Command, Output};

fn admin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_admin"))
        // No stack to find: help and usage errors must not look for one.
        .env_remove("LOCAL_STACK_PREFIX")
        .args(args)
        .output()
        .expect("the admin binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_commands_help_is_printed_with_status_zero() {
    let output = admin(&["app", "create", "--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = text(&output.stdout);
    assert!(help.starts_with("admin app create: "), "{help}");
    assert!(help.contains("usage: admin app create --name NAME --org ID [--org ID ...]"), "{help}");
    assert!(help.contains("example:\n  admin app create --name 'Acme CRM' --org 1 --org 2"), "{help}");
    assert_eq!(text(&admin(&["help", "app", "create"]).stdout), help);
}

#[test]
fn an_unknown_option_exits_with_status_two_and_the_usage() {
    let output = admin(&["app", "create", "--nme=Acme", "--org", "1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let error = text(&output.stderr);
    assert!(error.starts_with("admin: app create: unknown option --nme\n"), "{error}");
    assert!(error.contains("usage: admin app create --name NAME"), "{error}");
}
