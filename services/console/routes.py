"""The console's URLs: each GET reads through the page modules and renders a template;
each POST is an action (checked by the Guard, inputs checked by inputs.py), then a
redirect back with a flashed result (post/redirect/get, so a reload repeats nothing).

Owns the URL table and the action calls; not the data gathering (cluster_pages,
topic_pages, message_pages) nor the rules of who may act (guard.py)."""

import logging
import re

from flask import abort, flash, g, redirect, render_template, request, url_for

from quiver.errors import QuiverError
from quiver.wire.names import DLQ_PREFIX

from . import actions, charts, cluster_pages, inputs, message_pages, topic_pages
from .guard import Refused
from .login import LoginRefused

log = logging.getLogger(__name__)

MAX_LIST = 256   # messages, transactions on one page
_LOCAL_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9/_.~%?=&;+-]{0,1000}")   # where a login may send back to


def register(app, admin, config, rates, guard) -> None:
    """Add every URL of the console to the Flask `app` (collaborators passed in, none looked up)."""
    cap = config.preview_bytes
    history = charts.History()

    @app.get("/")
    def index():
        return redirect(url_for("cluster"))

    @app.get("/healthz")
    def healthz():
        return "ok\n", 200, {"Content-Type": "text/plain; charset=utf-8"}

    @app.get("/cluster")
    def cluster():
        return render_template("cluster.html", page="cluster", **cluster_pages.cluster(admin))

    @app.get("/topics")
    def topics():
        system = request.args.get("system") == "1"
        data = topic_pages.topics(admin, rates, config.known_groups, system)
        return render_template("topics.html", page="topics", system=system, **data)

    @app.get("/topics/<name>")
    def topic(name):
        name = inputs.topic({"topic": name})
        refresh = inputs.count(request.args, "refresh", 5, 3600, 0)
        data = topic_pages.topic(admin, rates, name, config.known_groups)
        return render_template("topic.html", page="topics", refresh=refresh,
                               charts=charts.topic_charts(history, data), **data)

    @app.post("/topics")
    def create_topic():
        guard.check_action(request.form)
        name = inputs.topic(request.form)
        queues = inputs.count(request.form, "queues", 1, 64, 4)
        return _act(lambda: admin.create_topic(name, queues=queues),
                    f"topic {name} created with {queues} queues on every broker", url_for("topics"))

    @app.post("/topics/<name>/send")
    def send_message(name):
        guard.check_action(request.form)
        name = inputs.topic({"topic": name})
        body, keys, tags = inputs.body(request.form), inputs.keys(request.form), inputs.key(request.form, "tags")
        return _act(lambda: actions.send_test(admin, name, body, keys, tags), f"a test message sent to {name}",
                    url_for("topic", name=name))

    @app.get("/topics/<name>/delete")
    def confirm_delete(name):
        if not guard.can_act():
            raise Refused("log in with the right to act first" if guard.actions_enabled else
                          "actions are off: this console is read-only")
        return render_template("delete.html", page="topics", name=inputs.topic({"topic": name}))

    @app.post("/topics/<name>/delete")
    def delete_topic(name):
        guard.check_action(request.form)
        name = inputs.topic({"topic": name})
        inputs.confirmed(request.form, name)
        return _act(lambda: admin.delete_topic(name), f"topic {name} deleted on every broker", url_for("topics"),
                    failed_back=url_for("topic", name=name))

    @app.get("/groups")
    def groups():
        name = inputs.group(request.args, required=False)
        statuses = topic_pages.broker_statuses(admin)
        rows, error, left_out = topic_pages.group_rows(admin, config.known_groups, statuses)
        producers = topic_pages.producer_rows(statuses[0])   # a broker not answering: said once, above
        data = topic_pages.group(admin, name) if name else None
        refresh = inputs.count(request.args, "refresh", 5, 3600, 0)
        return render_template("groups.html", page="groups", known=rows, group=data, list_error=error,
                               left_out=left_out, producers=producers, refresh=refresh,
                               charts=charts.group_charts(history, data) if data else [])

    @app.post("/groups/reset")
    def reset_offset():
        guard.check_action(request.form)
        group, topic_ = inputs.group(request.form), inputs.topic(request.form)
        ts = inputs.when_ms(request.form, "time")
        if ts is None:
            raise inputs.InputError("time: when to reset to is required")

        def reset():
            done = admin.reset_offset(group, topic_, ts)
            return f"{len(done.offsets)} queues, {done.members} online members told"
        return _act(reset, f"group {group} reset on {topic_}", url_for("groups", group=group))

    @app.get("/messages")
    def messages():
        args = request.args
        query = {"topic": inputs.topic(args, required=False), "key": inputs.key(args),
                 "msg_id": inputs.msg_id(args), "begin_ms": inputs.when_ms(args, "begin"),
                 "end_ms": inputs.when_ms(args, "end"), "max": inputs.count(args, "max", 1, MAX_LIST, 32)}
        if (query["key"] or query["begin_ms"] is not None) and not query["topic"]:
            raise inputs.InputError("topic: a search by key or by time needs the topic")
        data = message_pages.search(admin, query, cap)
        return render_template("messages.html", page="messages", query=args, **data)

    @app.get("/dlq")
    def dlq():
        name = inputs.group(request.args, required=False)
        limit = inputs.count(request.args, "max", 1, MAX_LIST, 64)
        names, error = cluster_pages.attempt(admin.topic_list)
        dead = sorted(t[len(DLQ_PREFIX):] for t in names or [] if t.startswith(DLQ_PREFIX))
        known = topic_pages.readable_groups(admin, dead) if guard.users else dead
        data = message_pages.dlq(admin, name, limit, cap) if name else None
        return render_template("dlq.html", page="dlq", known=known, dlq=data, list_error=error)

    @app.post("/dlq/resend")
    def dlq_resend():
        guard.check_action(request.form)
        group = inputs.group(request.form)
        msg_id = inputs.msg_id(request.form)

        def resend():
            sent = admin.resend_dlq(group, [msg_id] if msg_id else None)
            return f"{len(sent)} message(s) sent back to their topic"
        return _act(resend, f"DLQ of {group}", url_for("dlq", group=group))

    @app.get("/scheduler")
    def scheduler():
        return render_template("scheduler.html", page="scheduler", **cluster_pages.scheduler(admin))

    @app.get("/transactions")
    def transactions():
        limit = inputs.count(request.args, "max", 1, MAX_LIST, 100)
        return render_template("transactions.html", page="transactions",
                               **cluster_pages.transactions(admin, limit))

    @app.route("/login", methods=["GET", "POST"])
    def login():
        if not guard.needs_login:
            abort(404)
        if guard.users is not None:
            return _user_login()
        if request.method == "POST":
            if guard.login(request.form):
                log.info("console login from %s", request.remote_addr)
                flash("logged in: actions are on")
                return redirect(url_for("cluster"), 303)
            log.warning("console login refused from %s", request.remote_addr)
            return render_template("login.html", page="login", failed=True), 403
        return render_template("login.html", page="login", failed=False)

    @app.post("/logout")
    def logout():
        guard.logout(request.form)
        return redirect(url_for("login" if guard.users is not None else "cluster"), 303)

    def _user_login():
        """Auth on: log in with a user's access key and secret key, then back where she was going."""
        back = request.values.get("next", "")
        back = back if isinstance(back, str) and _LOCAL_PATH.fullmatch(back) else url_for("cluster")
        if request.method == "GET":
            return render_template("login.html", page="login", failed="", back=back)
        ip = request.remote_addr or ""
        try:
            guard.login_user(request.form, ip, request.files)
        except LoginRefused as exc:
            log.warning("console login refused from %s: %s", ip, exc)
            headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else {}
            return render_template("login.html", page="login", failed=str(exc), back=back), exc.status, headers
        log.info("console login from %s", ip)
        return redirect(back, 303)

    @app.errorhandler(inputs.InputError)
    def bad_input(exc):
        return render_template("error.html", page="", title="Bad input", message=str(exc)), 400

    @app.errorhandler(Refused)
    def refused(exc):
        return render_template("error.html", page="", title="Refused", message=str(exc)), 403

    def _act(fn, what: str, back: str, failed_back: str | None = None):
        """Run an action; its result or error (the broker's refusal with its remark) is flashed on
        the page it came from (`failed_back`, when it failed and that differs)."""
        try:
            detail = fn()
        except QuiverError as exc:
            log.warning("console action failed: %s (%s): %s", what, _who(), exc)
            flash(f"failed: {what}: {type(exc).__name__}: {exc}", "error")
            return redirect(failed_back or back, 303)
        else:
            log.info("console action: %s (%s): %s", what, _who(), detail or "done")
            flash(f"done: {what}" + (f": {detail}" if isinstance(detail, str) else ""))
        return redirect(back, 303)


def _who() -> str:
    """Who ran an action, for the log: the user's access key (auth on), else the token's login."""
    s = g.get("user_session")
    return f"user {s.access_key[:10]}..." if s is not None else "admin token"
