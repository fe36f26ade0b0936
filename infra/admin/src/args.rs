//! The command line: the table of commands with their arguments, options and help, and the
//! parser that checks a command line against it.
//!
//! Hand-written rather than a crate: the table, the help with an example per command and how
//! often each option may be given would be ours with any parser, and what is left (`--name
//! value`, `--name=value`, `--`, `--help`) is a few lines here. clap would add seconds to every
//! clean build of the workspace on a 2-core machine, and lexopt only the splitting of words.

use std::fmt::Write as _;
use std::str::FromStr;

/// What a command does; `main` runs each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Import,
    MeetingDelete,
    Recount,
    Reindex,
    AppCreate,
    AppDeactivate,
    AppLink,
    AppUnlink,
    AppGrant,
    AppRevoke,
    AppList,
    ApiKeyCreate,
    ApiKeyList,
    ApiKeyRevoke,
    PepperStatus,
    PepperStage,
    PepperPromote,
    PepperRetire,
    FlowServerSetKey,
}

/// How often an option may be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurs {
    Once,
    Optional,
    OneOrMore,
    /// A flag without a value, at most once.
    Flag,
}

/// An option of a command, `--name VALUE`.
#[derive(Debug)]
pub struct OptionSpec {
    /// Without the leading `--`.
    pub name: &'static str,
    /// The value's placeholder in the help (`ID`); empty for a flag.
    pub value: &'static str,
    pub occurs: Occurs,
    pub help: &'static str,
}

/// A command: the words that name it, its arguments and options, and its help.
#[derive(Debug)]
pub struct Command {
    pub action: Action,
    pub words: &'static [&'static str],
    /// Positional arguments as the usage shows them; a bracketed one (`[KEY]`) is optional.
    pub arguments: &'static [&'static str],
    pub options: &'static [OptionSpec],
    /// One line in the list of commands.
    pub summary: &'static str,
    /// More for the command's own help; may be empty.
    pub details: &'static str,
    pub example: &'static str,
}

const fn option(name: &'static str, value: &'static str, occurs: Occurs, help: &'static str) -> OptionSpec {
    OptionSpec { name, value, occurs, help }
}

/// Every command, in the order the list shows them.
pub const COMMANDS: &[Command] = &[
    Command {
        action: Action::Import,
        words: &["import"],
        arguments: &["FILE.json"],
        options: &[],
        summary: "upsert organizations, users and meetings from a JSON document",
        details: "The format is that of fixtures/demo-meetings.json. The whole document is checked first; \
                  an invalid one is refused with a message per bad field and nothing is written. \
                  Progress goes to standard error.",
        example: "admin import fixtures/demo-meetings.json",
    },
    Command {
        action: Action::MeetingDelete,
        words: &["meeting", "delete"],
        arguments: &["MEETING_ID"],
        options: &[],
        summary: "delete a meeting with its transcript; announces meeting.deleted",
        details: "The meeting leaves every list and read at once; external applications linked to its \
                  organization get meeting.deleted on their webhooks.",
        example: "admin meeting delete 1001",
    },
    Command {
        action: Action::Recount,
        words: &["recount"],
        arguments: &[],
        options: &[option("org", "ID", Occurs::OneOrMore, "an organization to count (repeat for more)")],
        summary: "write organizations' meeting counts",
        details: "For meetings imported before counts were kept.",
        example: "admin recount --org 1 --org 2",
    },
    Command {
        action: Action::Reindex,
        words: &["reindex"],
        arguments: &[],
        options: &[option("org", "ID", Occurs::OneOrMore, "an organization to reindex (repeat for more)")],
        summary: "write organizations' meetings again into the filter indexes",
        details: "For organizations stored before the filter indexes: every meeting is written again.",
        example: "admin reindex --org 1",
    },
    Command {
        action: Action::AppCreate,
        words: &["app", "create"],
        arguments: &[],
        options: &[
            option("name", "NAME", Occurs::Once, "the application's name"),
            option("org", "ID", Occurs::OneOrMore, "an organization it may read (repeat for more)"),
            option("scope", "SCOPE", Occurs::Optional, "a scope besides meetings:read (webhooks:manage)"),
        ],
        summary: "create an application; prints its client_id and client_secret",
        details: "The client secret is printed only here; only its keyed hash is stored. \
                  Every application has meetings:read.",
        example: "admin app create --name 'Acme CRM' --org 1 --org 2",
    },
    Command {
        action: Action::AppDeactivate,
        words: &["app", "deactivate"],
        arguments: &["CLIENT_ID"],
        options: &[],
        summary: "deactivate an application: its credentials and tokens stop",
        details: "",
        example: "admin app deactivate CLIENT_ID",
    },
    Command {
        action: Action::AppLink,
        words: &["app", "link"],
        arguments: &["CLIENT_ID"],
        options: &[option("org", "ID", Occurs::Once, "the organization to link")],
        summary: "let an application read one more organization",
        details: "",
        example: "admin app link CLIENT_ID --org 2",
    },
    Command {
        action: Action::AppUnlink,
        words: &["app", "unlink"],
        arguments: &["CLIENT_ID"],
        options: &[option("org", "ID", Occurs::Once, "the organization to unlink")],
        summary: "take one organization away from an application",
        details: "",
        example: "admin app unlink CLIENT_ID --org 1",
    },
    Command {
        action: Action::AppGrant,
        words: &["app", "grant"],
        arguments: &["CLIENT_ID"],
        options: &[option("scope", "SCOPE", Occurs::OneOrMore, "the scope to grant (repeat for more)")],
        summary: "grant an application a scope (webhooks:manage)",
        details: "Its tokens get the scope when they ask for it with scope=...",
        example: "admin app grant CLIENT_ID --scope webhooks:manage",
    },
    Command {
        action: Action::AppRevoke,
        words: &["app", "revoke"],
        arguments: &["CLIENT_ID"],
        options: &[option("scope", "SCOPE", Occurs::OneOrMore, "the scope to take away (repeat for more)")],
        summary: "take a scope away from an application",
        details: "Tokens already issued with the scope lose it at once.",
        example: "admin app revoke CLIENT_ID --scope webhooks:manage",
    },
    Command {
        action: Action::AppList,
        words: &["app", "list"],
        arguments: &[],
        options: &[],
        summary: "list the external applications",
        details: "",
        example: "admin app list",
    },
    Command {
        action: Action::ApiKeyCreate,
        words: &["api-key", "create"],
        arguments: &[],
        options: &[
            option("account", "UUID", Occurs::Once, "the account the key acts for"),
            option("name", "NAME", Occurs::Optional, "a name to tell keys apart (default: default)"),
        ],
        summary: "create an API key; prints it, its account and its key_id",
        details: "The key is printed only here; only its keyed hash is stored.",
        example: "admin api-key create --account 7d0f7a52-3f4e-4a53-9b7a-3a8f6f0b9c11 --name ci",
    },
    Command {
        action: Action::ApiKeyList,
        words: &["api-key", "list"],
        arguments: &[],
        options: &[],
        summary: "list API keys: ids, accounts, names (never keys or hashes)",
        details: "",
        example: "admin api-key list",
    },
    Command {
        action: Action::ApiKeyRevoke,
        words: &["api-key", "revoke"],
        arguments: &["KEY_ID"],
        options: &[],
        summary: "delete an API key: requests with it fail at once",
        details: "",
        example: "admin api-key revoke KEY_ID",
    },
    Command {
        action: Action::PepperStatus,
        words: &["pepper", "status"],
        arguments: &[],
        options: &[],
        summary: "show which pepper each credential's hash was made with",
        details: "",
        example: "admin pepper status",
    },
    Command {
        action: Action::PepperStage,
        words: &["pepper", "stage"],
        arguments: &[],
        options: &[],
        summary: "rotation step 1: stage a new random pepper",
        details: "Then promote, then retire: docs/operations.md, \"Rotating the pepper\".",
        example: "admin pepper stage",
    },
    Command {
        action: Action::PepperPromote,
        words: &["pepper", "promote"],
        arguments: &[],
        options: &[option("force", "", Occurs::Flag, "promote without waiting for every container to read the stage")],
        summary: "rotation step 2: the staged pepper becomes current",
        details: "Refuses until the staged pepper has reached every container.",
        example: "admin pepper promote",
    },
    Command {
        action: Action::PepperRetire,
        words: &["pepper", "retire"],
        arguments: &[],
        options: &[option("force", "", Occurs::Flag, "retire without waiting, even while credentials depend on it")],
        summary: "rotation step 3: drop the previous pepper",
        details: "Refuses while an active credential still depends on the previous pepper.",
        example: "admin pepper retire",
    },
    Command {
        action: Action::FlowServerSetKey,
        words: &["flow-server", "set-key"],
        arguments: &["[KEY]"],
        options: &[],
        summary: "store the flow server's API key (FlowServerSecret)",
        details: "KEY is read from standard input when not given (it then stays out of the shell's history).",
        example: "echo \"$LANGFLOW_KEY\" | admin flow-server set-key",
    },
];

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// Print this help and stop.
    Help(String),
    Run(Invocation),
}

/// A command line checked against its command's entry.
#[derive(Debug)]
pub struct Invocation {
    pub command: &'static Command,
    pub arguments: Vec<String>,
    /// Option names and values in the order given; a flag's value is empty.
    options: Vec<(&'static str, String)>,
}

/// A command line that does not fit: what is wrong, and the usage to print with it.
#[derive(Debug, thiserror::Error)]
#[error("{message}\n\n{usage}")]
pub struct UsageError {
    pub message: String,
    pub usage: String,
}

impl Invocation {
    /// The value of an option given at most once.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.options.iter().find(|(given, _)| *given == name).map(|(_, value)| value.as_str())
    }

    /// Every value of an option, in the order given.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.options.iter().filter(move |(given, _)| *given == name).map(|(_, value)| value.as_str())
    }

    /// Whether a flag was given.
    pub fn flag(&self, name: &str) -> bool {
        self.options.iter().any(|(given, _)| *given == name)
    }

    /// Every value of an option parsed as `T`; `expected` says what a value must be.
    pub fn parsed<T: FromStr>(&self, name: &str, expected: &str) -> Result<Vec<T>, UsageError> {
        self.values(name)
            .map(|value| value.parse().map_err(|_| self.error(format!("--{name} {value}: not {expected}"))))
            .collect()
    }

    /// A required positional argument (the parser has checked it is there).
    pub fn argument(&self, index: usize) -> Result<&str, UsageError> {
        self.arguments.get(index).map(String::as_str).ok_or_else(|| {
            self.error(format!("needs {}", self.command.arguments.get(index).copied().unwrap_or("an argument")))
        })
    }

    /// A usage error of this command.
    pub fn error(&self, message: impl std::fmt::Display) -> UsageError {
        self.command.error(message)
    }
}

impl Command {
    /// `app create`.
    pub fn name(&self) -> String {
        self.words.join(" ")
    }

    /// `admin app create --name NAME --org ID [--org ID ...]`.
    pub fn synopsis(&self) -> String {
        let mut synopsis = format!("admin {}", self.name());
        for argument in self.arguments {
            let _ = write!(synopsis, " {argument}");
        }
        for option in self.options {
            let _ = match option.occurs {
                Occurs::Once => write!(synopsis, " --{} {}", option.name, option.value),
                Occurs::Optional => write!(synopsis, " [--{} {}]", option.name, option.value),
                Occurs::OneOrMore => {
                    write!(synopsis, " --{0} {1} [--{0} {1} ...]", option.name, option.value)
                }
                Occurs::Flag => write!(synopsis, " [--{}]", option.name),
            };
        }
        synopsis
    }

    /// `app create --name NAME --org ID...`: the command with what it needs, for the list.
    pub fn brief(&self) -> String {
        let mut brief = self.name();
        for argument in self.arguments {
            let _ = write!(brief, " {argument}");
        }
        for option in self.options {
            let _ = match option.occurs {
                Occurs::Once => write!(brief, " --{} {}", option.name, option.value),
                Occurs::OneOrMore => write!(brief, " --{} {}...", option.name, option.value),
                Occurs::Optional | Occurs::Flag => Ok(()),
            };
        }
        brief
    }

    /// `admin app create --help`: what it does, its usage, its options and an example.
    pub fn help(&self) -> String {
        let mut help = format!("admin {}: {}\n", self.name(), self.summary);
        if !self.details.is_empty() {
            let _ = writeln!(help, "{}", self.details);
        }
        let _ = writeln!(help, "\nusage: {}\n\noptions:", self.synopsis());
        let mut rows: Vec<(String, &str)> = self
            .options
            .iter()
            .map(|option| {
                let spelled = if option.value.is_empty() {
                    format!("--{}", option.name)
                } else {
                    format!("--{} {}", option.name, option.value)
                };
                (spelled, option.help)
            })
            .collect();
        rows.push(("-h, --help".into(), "print this help"));
        let width = rows.iter().map(|(spelled, _)| spelled.len()).max().unwrap_or(0);
        for (spelled, text) in rows {
            let _ = writeln!(help, "  {spelled:width$}  {text}");
        }
        if self.options.iter().any(|option| !option.value.is_empty()) {
            let _ = writeln!(help, "\n{VALUE_FORMS}");
        }
        let _ = write!(help, "\nexample:\n  {}", self.example);
        help
    }

    fn error(&self, message: impl std::fmt::Display) -> UsageError {
        UsageError {
            message: format!("{}: {message}", self.name()),
            usage: format!(
                "usage: {}\n`admin {} --help` shows its options and an example.",
                self.synopsis(),
                self.name()
            ),
        }
    }
}

const VALUE_FORMS: &str = "An option's value follows it (--org 1) or is joined to it with = (--org=1).";

/// `admin --help` (every command) or `admin help app` (the commands of `group`), one line each.
fn command_list(commands: &[&Command], group: Option<&str>) -> String {
    let width = commands.iter().map(|command| command.brief().len()).max().unwrap_or(0);
    let mut list = match group {
        None => String::from(
            "admin: the operator CLI: import meeting data, manage external applications and API keys,\n\
             rotate the pepper, set the flow server's key.\n\nusage: admin COMMAND [ARGUMENTS] [OPTIONS]\n",
        ),
        Some(group) => format!("usage: admin {group} COMMAND [ARGUMENTS] [OPTIONS]\n"),
    };
    list.push_str("\ncommands:\n");
    for command in commands {
        let _ = writeln!(list, "  {:width$}  {}", command.brief(), command.summary);
    }
    let _ = write!(
        list,
        "\n`admin help COMMAND` or `admin COMMAND --help` shows a command's options and an example.\n{VALUE_FORMS}"
    );
    list
}

fn all_commands() -> String {
    command_list(&COMMANDS.iter().collect::<Vec<_>>(), None)
}

fn is_help(word: &str) -> bool {
    matches!(word, "--help" | "-h")
}

/// Checks a command line (without the program's name) against the table of commands.
pub fn parse(args: &[String]) -> Result<Parsed, UsageError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] => return Ok(Parsed::Help(all_commands())),
        [first, topic @ ..] if *first == "help" || is_help(first) => return help(topic).map(Parsed::Help),
        _ => {}
    }
    let Some(command) = COMMANDS.iter().find(|command| words.starts_with(command.words)) else {
        let before_options: Vec<&str> = words.iter().copied().take_while(|word| !word.starts_with('-')).collect();
        if words.iter().any(|word| is_help(word)) {
            return help(&before_options).map(Parsed::Help);
        }
        return Err(unknown_command(&words));
    };
    let rest = &words[command.words.len()..];
    // Help wins over any mistake beside it: whoever asks for it is finding out how to write the rest.
    if rest.iter().take_while(|word| **word != "--").any(|word| is_help(word)) {
        return Ok(Parsed::Help(command.help()));
    }
    parse_rest(command, rest).map(Parsed::Run)
}

/// `admin help TOPIC`: a command's help, a group's commands (`admin help app`), or every command.
fn help(topic: &[&str]) -> Result<String, UsageError> {
    if let Some(command) = COMMANDS.iter().find(|command| command.words == topic) {
        return Ok(command.help());
    }
    let group: Vec<&Command> = COMMANDS.iter().filter(|command| command.words.starts_with(topic)).collect();
    match topic {
        [] => Ok(all_commands()),
        [first, ..] if !group.is_empty() => Ok(command_list(&group, Some(first))),
        _ => Err(unknown_command(topic)),
    }
}

/// An error naming the words that are no command (never the arguments after them, which may be
/// secrets), with the commands that might have been meant.
fn unknown_command(words: &[&str]) -> UsageError {
    let first = words.first().copied().unwrap_or_default();
    let group: Vec<&Command> = COMMANDS.iter().filter(|command| command.words[0] == first).collect();
    if group.is_empty() {
        let what = if first.starts_with('-') { "unknown option" } else { "unknown command:" };
        return UsageError { message: format!("{what} {first}"), usage: all_commands() };
    }
    let message = match words.get(1) {
        Some(second) => format!("unknown command: {first} {second}"),
        None => format!("{first} needs a command"),
    };
    UsageError { message, usage: command_list(&group, Some(first)) }
}

/// The arguments and options after a command's words.
fn parse_rest(command: &'static Command, words: &[&str]) -> Result<Invocation, UsageError> {
    let mut arguments = Vec::new();
    let mut options = Vec::new();
    let mut words = words.iter();
    let mut only_arguments = false;
    while let Some(&word) = words.next() {
        // Only `--` words are options, so an argument such as a key may start with one `-`.
        let Some(spelled) = word.strip_prefix("--").filter(|_| !only_arguments) else {
            arguments.push(word.to_owned());
            continue;
        };
        if spelled.is_empty() {
            only_arguments = true;
            continue;
        }
        let (name, joined) = match spelled.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (spelled, None),
        };
        let option = command
            .options
            .iter()
            .find(|option| option.name == name)
            .ok_or_else(|| command.error(format!("unknown option --{name}")))?;
        let value = match (option.occurs, joined) {
            (Occurs::Flag, None) => String::new(),
            (Occurs::Flag, Some(_)) => return Err(command.error(format!("--{name} takes no value"))),
            (_, Some(value)) => value.to_owned(),
            (_, None) => match words.next() {
                Some(value) if !value.starts_with("--") => (*value).to_owned(),
                _ => {
                    let placeholder = option.value;
                    return Err(command
                        .error(format!("--{name} needs a value: --{name} {placeholder} or --{name}={placeholder}")));
                }
            },
        };
        options.push((option.name, value));
    }
    check_counts(command, &arguments, &options)?;
    Ok(Invocation { command, arguments, options })
}

/// The positional arguments and how often each option was given, against the command's entry.
fn check_counts(command: &Command, arguments: &[String], options: &[(&str, String)]) -> Result<(), UsageError> {
    let required: Vec<&str> = command.arguments.iter().copied().filter(|argument| !argument.starts_with('[')).collect();
    if arguments.len() < required.len() {
        return Err(command.error(format!("needs {}", required[arguments.len()..].join(" "))));
    }
    if let Some(extra) = arguments.get(command.arguments.len()) {
        return Err(command.error(format!("unexpected argument {extra:?}")));
    }
    for option in command.options {
        let given = options.iter().filter(|(name, _)| *name == option.name).count();
        match option.occurs {
            Occurs::Once | Occurs::OneOrMore if given == 0 => {
                return Err(command.error(format!("needs --{} {}", option.name, option.value)));
            }
            Occurs::Once | Occurs::Optional | Occurs::Flag if given > 1 => {
                return Err(command.error(format!("--{} may be given only once", option.name)));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &str) -> Result<Parsed, UsageError> {
        parse(&line.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
    }

    fn run(line: &str) -> Invocation {
        match parse_line(line) {
            Ok(Parsed::Run(invocation)) => invocation,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn help(line: &str) -> String {
        match parse_line(line) {
            Ok(Parsed::Help(help)) => help,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn error(line: &str) -> UsageError {
        match parse_line(line) {
            Err(error) => error,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn an_option_takes_its_value_from_the_next_word_or_after_an_equals_sign() {
        for line in ["app create --name Acme --org 1 --org 2", "app create --name=Acme --org=1 --org 2"] {
            let invocation = run(line);
            assert_eq!(invocation.command.action, Action::AppCreate);
            assert_eq!(invocation.value("name"), Some("Acme"));
            assert_eq!(invocation.values("org").collect::<Vec<_>>(), ["1", "2"], "{line}");
        }
        // Only the first `=` splits, so a value may hold one.
        assert_eq!(run("app create --org 1 --name=a=b").value("name"), Some("a=b"));
        let link = run("app link CLIENT --org=2");
        assert_eq!((link.arguments.as_slice(), link.argument(0).ok()), (&["CLIENT".to_owned()][..], Some("CLIENT")));
        assert_eq!(run("api-key create --account=A").value("name"), None);
    }

    #[test]
    fn flags_are_given_or_not() {
        assert!(!run("pepper promote").flag("force"));
        assert!(run("pepper retire --force").flag("force"));
        assert_eq!(error("pepper retire --force=yes").message, "pepper retire: --force takes no value");
    }

    #[test]
    fn an_unknown_option_is_named_with_the_commands_usage() {
        let error = error("app create --nme Acme --org 1");
        assert_eq!(error.message, "app create: unknown option --nme");
        assert!(
            error.usage.starts_with("usage: admin app create --name NAME --org ID [--org ID ...] [--scope SCOPE]\n"),
            "{error}"
        );
        assert_eq!(super::tests::error("pepper stage --force").message, "pepper stage: unknown option --force");
        assert_eq!(super::tests::error("app list --name=x").message, "app list: unknown option --name");
    }

    #[test]
    fn a_missing_value_names_the_option_and_both_forms() {
        for line in ["app create --org 1 --name", "app create --name --org 1"] {
            assert_eq!(error(line).message, "app create: --name needs a value: --name NAME or --name=NAME", "{line}");
        }
        assert_eq!(error("recount --org").message, "recount: --org needs a value: --org ID or --org=ID");
    }

    #[test]
    fn arguments_and_option_counts_are_checked() {
        assert_eq!(error("import").message, "import: needs FILE.json");
        assert_eq!(error("import a.json b.json").message, "import: unexpected argument \"b.json\"");
        assert_eq!(error("recount").message, "recount: needs --org ID");
        assert_eq!(error("app link CLIENT --org 1 --org 2").message, "app link: --org may be given only once");
        assert_eq!(error("app create --org 1").message, "app create: needs --name NAME");
        assert!(run("flow-server set-key").arguments.is_empty());
        // After `--` every word is an argument, so a key may start with dashes.
        assert_eq!(run("flow-server set-key -- --key").arguments, ["--key"]);
        assert_eq!(run("flow-server set-key -k").arguments, ["-k"]);
    }

    #[test]
    fn values_parse_or_name_what_they_must_be() {
        assert_eq!(run("recount --org 1 --org=2").parsed::<i64>("org", "an integer id").unwrap(), [1, 2]);
        let error = run("recount --org=x").parsed::<i64>("org", "an integer id").unwrap_err();
        assert_eq!(error.message, "recount: --org x: not an integer id");
    }

    #[test]
    fn every_command_has_help_with_its_usage_options_and_example() {
        for command in COMMANDS {
            let name = command.name();
            let own = help(&format!("{name} --help"));
            assert_eq!(own, command.help());
            assert_eq!(help(&format!("help {name}")), own);
            assert_eq!(help(&format!("{name} -h")), own);
            assert!(own.starts_with(&format!("admin {name}: {}", command.summary)), "{own}");
            assert!(own.contains(&format!("usage: {}\n", command.synopsis())), "{own}");
            assert!(own.contains("  -h, --help"), "{own}");
            for option in command.options {
                assert!(own.contains(&format!("  --{}", option.name)), "{own}");
            }
            assert!(own.ends_with(&format!("example:\n  {}", command.example)), "{own}");
            assert!(command.example.contains(&format!("admin {name}")), "{name}");
        }
        // Help wins over a mistake beside it.
        assert_eq!(help("app create --bogus --help"), help("help app create"));
    }

    #[test]
    fn app_create_help_reads_as_documented() {
        assert_eq!(
            help("app create --help"),
            "admin app create: create an application; prints its client_id and client_secret\n\
             The client secret is printed only here; only its keyed hash is stored. \
             Every application has meetings:read.\n\
             \n\
             usage: admin app create --name NAME --org ID [--org ID ...] [--scope SCOPE]\n\
             \n\
             options:\n  \
             --name NAME    the application's name\n  \
             --org ID       an organization it may read (repeat for more)\n  \
             --scope SCOPE  a scope besides meetings:read (webhooks:manage)\n  \
             -h, --help     print this help\n\
             \n\
             An option's value follows it (--org 1) or is joined to it with = (--org=1).\n\
             \n\
             example:\n  \
             admin app create --name 'Acme CRM' --org 1 --org 2"
        );
    }

    #[test]
    fn the_list_has_one_line_per_command_and_a_group_lists_its_own() {
        let list = help("--help");
        assert_eq!(help(""), list);
        assert_eq!(help("help"), list);
        assert_eq!(help("-h"), list);
        for command in COMMANDS {
            let line = list.lines().find(|line| line.starts_with(&format!("  {}", command.name())));
            assert!(line.is_some_and(|line| line.ends_with(command.summary)), "{}", command.name());
        }
        let app = help("help app");
        assert_eq!(help("app --help"), app);
        assert!(app.contains("  app create") && !app.contains("  import"), "{app}");
    }

    #[test]
    fn an_unknown_command_shows_the_commands_it_might_have_been() {
        let bogus = error("bogus --name x");
        assert_eq!(bogus.message, "unknown command: bogus");
        assert_eq!(bogus.usage, help("help"));
        let app = error("app");
        assert_eq!((app.message.as_str(), app.usage), ("app needs a command", help("help app")));
        // The words after the command are not repeated: they may be a secret.
        assert_eq!(error("flow-server set-kee SECRET").message, "unknown command: flow-server set-kee");
        assert_eq!(error("--verbose").message, "unknown option --verbose");
        assert_eq!(error("help bogus").message, "unknown command: bogus");
    }
}
