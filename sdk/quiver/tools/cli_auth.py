"""`quiver auth init` and `quiver acl ...`: turning auth on, and users and rules (mqadmin
updateAclConfig, deleteAccessConfig, getAclConfig). A change some broker did not take exits 1."""

import os

import click

from quiver.tools.cli_common import EXIT_NOT_FOUND, finish, output_option, print_json, say


@click.group()
def auth():
    """Turn auth on: an auth dir with the server, service and admin keys.

    \b
    Examples:
      quiver auth init ./auth
      quiver auth controller-key ./controller.key
    """


@auth.command("init")
@click.argument("dir")
def auth_init(dir):
    """Create DIR with the server key, service keys and a SUPER user's key file (admin.key).

    \b
    Examples:
      quiver auth init ./auth && export QUIVER_CREDENTIALS=./auth/admin.key
    """
    from quiver.wire.curve import init_auth_dir
    admin = init_auth_dir(dir)
    key = os.path.join(os.path.abspath(dir), "admin.key")
    say(f"auth dir {os.path.abspath(dir)}: server key, service keys, and the SUPER user {admin.user!r} in {key}")
    say(f"  every service: --auth-dir {os.path.abspath(dir)}  (or QUIVER_AUTH_DIR)")
    say(f"  the CLI:       --credentials {key}  (or QUIVER_CREDENTIALS)")


def write_controller_key(path: str) -> None:
    """A new Raft key (32 random bytes, hex) in a new file only its owner may read."""
    import secrets
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secrets.token_hex(32) + "\n")


@auth.command("controller-key")
@click.argument("file")
@click.option("--if-missing", is_flag=True, help="keep FILE if it already holds a key (exit 0)")
def auth_controller_key(file, if_missing):
    """Write a new Raft key to FILE (mode 600): give every controller the same file with
    --controller-key-file (QUIVER_CONTROLLER_KEY_FILE). With auth on, the auth dir's server key
    serves instead.

    \b
    Examples:
      quiver auth controller-key ./controller.key
    """
    if os.path.exists(file):
        if if_missing:
            say(f"{os.path.abspath(file)} kept")
            return
        raise click.ClickException(f"{file} exists; remove it first (every controller must share one key)")
    write_controller_key(file)
    say(f"Raft key in {os.path.abspath(file)}: every controller --controller-key-file {os.path.abspath(file)}")


@click.group()
def acl():
    """Users and rules (needs --credentials of a SUPER user).

    \b
    Examples:
      quiver acl user add frank --out frank.key
      quiver acl grant frank --resource topic:Orders --actions PUB
      quiver acl list
    """


@acl.group()
def user():
    """Users: add (writes the user's key file), list, delete.

    \b
    Examples:
      quiver acl user add frank --out frank.key
      quiver acl user list
      quiver acl user delete frank
    """


@user.command("add")
@click.argument("name")
@click.option("--out", required=True, help="where to write the new key file")
@click.option("--super", "super_user", is_flag=True, help="a SUPER user (every right)")
@click.option("--force", is_flag=True, help="replace an existing key file (re-key: the old key stops working)")
@click.pass_obj
def user_add(obj, name, out, super_user, force):
    """Add a user (or re-key one) and write its key file.

    \b
    Examples:
      quiver acl user add frank --out frank.key
      quiver acl user add ops --out ops.key --super
    """
    from quiver.wire.curve import write_credentials
    if os.path.exists(out) and not force:
        raise click.UsageError(f"{out} exists: pass --force to replace it (the user's old key stops working)")
    with obj.admin() as a:
        creds = a.acl_add_user(name, super_user=super_user)
    write_credentials(out, creds)
    say(f"user {name!r}{' (SUPER)' if super_user else ''}: key file {out} (give it to the user; it holds their "
        f"secret key)")


@user.command("list")
@output_option
@click.pass_obj
def user_list(obj, output):
    """Users per broker.

    \b
    Examples:
      quiver acl user list -o json
    """
    with obj.admin() as a:
        acls = a.acl_list()
    if obj.fmt(output) == "json":
        print_json({b: {"users": x.get("users", []), "error": x.get("error")} for b, x in acls.items()})
        return
    for broker, x in acls.items():
        users = x.get("users", [])
        say(f"{broker}: " + (", ".join(f"{n} ({k})" for n, _, k in sorted(users)) or x.get("error", "-")))


@user.command("delete")
@click.argument("name")
@click.pass_obj
def user_delete(obj, name):
    """Delete a user and its rules.

    \b
    Examples:
      quiver acl user delete frank
    """
    with obj.admin() as a:
        _report(a.acl_delete_user(name))


def _actions(ctx, param, value: str) -> list[str]:
    """The comma list, each checked against the wire's ACTIONS before any call (exit 2)."""
    from quiver.wire.access import ACTIONS
    acts = [x.strip().upper() for x in value.split(",") if x.strip()]
    bad = [x for x in acts if x not in ACTIONS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: choose from {', '.join(ACTIONS)}")
    return acts


def _rule_options(f):
    f = click.option("--source", help="only from this CIDR, e.g. 10.0.0.0/8")(f)
    f = click.option("--deny", is_flag=True, help="a DENY rule (deny wins)")(f)
    f = click.option("--actions", default="", callback=_actions,
                     help="comma list of PUB,SUB,CREATE,UPDATE,DELETE,GET,LIST or ALL")(f)
    f = click.option("--resource", required=True, help="cluster | topic:NAME | group:NAME, '*' suffix for a prefix")(f)
    return click.argument("name")(f)


@acl.command()
@_rule_options
@click.pass_obj
def grant(obj, name, resource, actions, deny, source):
    """Add (or widen) a rule for a user.

    \b
    Examples:
      quiver acl grant frank --resource topic:Orders --actions PUB
      quiver acl grant frank --resource 'group:billing-*' --actions SUB --source 10.0.0.0/8
    """
    if not actions:
        raise click.UsageError("quiver acl grant: --actions PUB,SUB,... (or ALL) is required")
    with obj.admin() as a:
        _report(a.acl_grant(name, resource, actions, deny=deny, source=source))


@acl.command()
@_rule_options
@click.pass_obj
def revoke(obj, name, resource, actions, deny, source):
    """Remove a rule, or some of its actions.

    \b
    Examples:
      quiver acl revoke frank --resource topic:Orders --actions PUB
    """
    with obj.admin() as a:
        _report(a.acl_revoke(name, resource, actions or None, deny=deny, source=source))


@acl.command("list")
@output_option
@click.pass_obj
def acl_list(obj, output):
    """Users and rules as every broker holds them.

    \b
    Examples:
      quiver acl list
      quiver acl list -o json
    """
    with obj.admin() as a:
        acls = a.acl_list()
    if obj.fmt(output) == "json":
        print_json(acls)
        return
    for broker, x in acls.items():
        if "error" in x:
            say(f"{broker}: {x['error']}")
            continue
        say(f"{broker}: version {x.get('version')}")
        for name, key, kind in sorted(x.get("users", [])):
            say(f"  user {name:<20} {kind:<6} {key}")
        for who, res, acts, decision, src in sorted(x.get("rules", []), key=str):
            say(f"  rule {who:<20} {decision:<5} {','.join(acts):<24} {res}{'  from ' + src if src else ''}")


def _report(change) -> None:
    for broker, result in sorted(change.results.items()):
        say(f"{broker}: {result}")
    if not change.ok:
        finish(EXIT_NOT_FOUND, "some brokers did not take the change: run the command again once they are up")


def register(cli) -> None:
    cli.add_command(auth)
    cli.add_command(acl)
