"""`quiver` verbs run in-process with click's CliRunner against a stub cluster (quiver.testing).

    cli = StubCli(cluster)
    res = cli("topic", "create", "Orders")       # click's Result: exit_code, stdout, stderr
    doc = cli.json("topic", "status", "Orders")   # -o json parsed (asserts exit 0)
"""

import json

from click.testing import CliRunner

from quiver.tools.cli import cli as root
from quiver.tools.cli_common import Ctx


class StubCli:
    def __init__(self, cluster):
        self.cluster = cluster
        self.runner = CliRunner()

    def __call__(self, *args, input=None, env=None):
        obj = Ctx(connect=self.cluster.client, transport_factory=self.cluster.network.transport)
        res = self.runner.invoke(root, [str(a) for a in args], obj=obj, input=input, env=env)
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            raise res.exception
        return res

    def json(self, *args, code: int = 0):
        res = self(*args, "-o", "json")
        assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
        return json.loads(res.stdout)
