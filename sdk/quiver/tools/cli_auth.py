"""`quiver auth init` and `quiver acl ...`: turning auth on, and users and rules."""

import os
import sys


def cmd_auth(args) -> int:
    from quiver.wire.curve import init_auth_dir
    admin = init_auth_dir(args.dir)
    key = os.path.join(os.path.abspath(args.dir), "admin.key")
    print(f"auth dir {os.path.abspath(args.dir)}: server key, service keys, and the SUPER user "
          f"{admin.user!r} in {key}")
    print(f"  every service: --auth-dir {os.path.abspath(args.dir)}  (or QUIVER_AUTH_DIR)")
    print(f"  the CLI:       --credentials {key}  (or QUIVER_CREDENTIALS)")
    return 0


def cmd_acl(args) -> int:
    from quiver.tools.cli import _admin
    from quiver.wire.curve import write_credentials
    a = _admin(args)
    try:
        if args.action == "user":
            return _user(a, args, write_credentials)
        if args.action in ("grant", "revoke"):
            if not args.name or not args.resource:
                raise SystemExit(f"quiver acl {args.action} NAME --resource RES --actions A,B")
            actions = [x for x in (args.actions or "").split(",") if x]
            if args.action == "grant":
                if not actions:
                    raise SystemExit("quiver acl grant: --actions PUB,SUB,... (or ALL) is required")
                change = a.acl_grant(args.name, args.resource, actions, deny=args.deny, source=args.source)
            else:
                change = a.acl_revoke(args.name, args.resource, actions or None, deny=args.deny, source=args.source)
            return _report(change)
        if args.action == "list":
            for broker, acl in a.acl_list().items():
                if "error" in acl:
                    print(f"{broker}: {acl['error']}")
                    continue
                print(f"{broker}: version {acl.get('version')}")
                for name, key, kind in sorted(acl.get("users", [])):
                    print(f"  user {name:<20} {kind:<6} {key}")
                for user, res, acts, decision, src in sorted(acl.get("rules", []), key=str):
                    print(f"  rule {user:<20} {decision:<5} {','.join(acts):<24} {res}"
                          f"{'  from ' + src if src else ''}")
            return 0
    finally:
        a.shutdown()
    return 2


def _user(a, args, write_credentials) -> int:
    if args.sub == "list":
        for broker, acl in a.acl_list().items():
            users = acl.get("users", [])
            print(f"{broker}: " + (", ".join(f"{n} ({k})" for n, _, k in sorted(users)) or acl.get("error", "-")))
        return 0
    if not args.name:
        raise SystemExit(f"quiver acl user {args.sub} NAME")
    if args.sub == "delete":
        return _report(a.acl_delete_user(args.name))
    if not args.out:
        raise SystemExit("quiver acl user add NAME --out FILE: where to write the user's key file")
    if os.path.exists(args.out) and not args.force:
        raise SystemExit(f"{args.out} exists: pass --force to replace it (the user's old key stops working)")
    creds = a.acl_add_user(args.name, super_user=args.super)
    write_credentials(args.out, creds)
    print(f"user {args.name!r}{' (SUPER)' if args.super else ''}: key file {args.out} (give it to the user; "
          f"it holds their secret key)")
    return 0


def _report(change) -> int:
    for broker, result in sorted(change.results.items()):
        print(f"{broker}: {result}")
    if not change.ok:
        print("some brokers did not take the change: run the command again once they are up", file=sys.stderr)
        return 1
    return 0


def add_commands(sub) -> None:
    au = sub.add_parser("auth", help="turn auth on: create an auth dir (server, service and admin keys)")
    au.add_argument("action", choices=["init"])
    au.add_argument("dir")
    au.set_defaults(fn=cmd_auth)

    ac = sub.add_parser("acl", help="users and rules (needs --credentials of a SUPER user)")
    ac.add_argument("action", choices=["user", "grant", "revoke", "list"])
    ac.add_argument("sub", nargs="?", help="user: add | list | delete; grant/revoke: the user name")
    ac.add_argument("name", nargs="?")
    ac.add_argument("--out", help="user add: where to write the new key file")
    ac.add_argument("--super", action="store_true", help="user add: a SUPER user (every right)")
    ac.add_argument("--force", action="store_true", help="user add: replace an existing key file (re-key)")
    ac.add_argument("--resource", help="cluster | topic:NAME | group:NAME, '*' suffix for a prefix")
    ac.add_argument("--actions", help="comma list of PUB,SUB,CREATE,UPDATE,DELETE,GET,LIST or ALL")
    ac.add_argument("--deny", action="store_true", help="a DENY rule (deny wins)")
    ac.add_argument("--source", help="only from this CIDR, e.g. 10.0.0.0/8")
    ac.set_defaults(fn=_normalized)


def _normalized(args) -> int:
    # `quiver acl grant NAME ...`: the name arrives in `sub`
    if args.action in ("grant", "revoke") and args.name is None:
        args.name = args.sub
    if args.action == "user" and args.sub not in ("add", "list", "delete"):
        raise SystemExit("quiver acl user add|list|delete [NAME]")
    return cmd_acl(args)
