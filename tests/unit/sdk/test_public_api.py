"""What `import quiver` promises a user and a type checker."""

import inspect
from pathlib import Path

import quiver
from quiver import errors
from quiver.wire.codes import ResponseCode


def test_every_public_name_resolves():
    for name in quiver.__all__:
        assert getattr(quiver, name) is not None, name


def test_every_error_class_is_a_real_class_exported_from_quiver():
    classes = {n: c for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, errors.QuiverError)}
    for name, cls in classes.items():
        if cls.__name__ != name:
            continue                    # an older alias (SystemError_)
        assert name in quiver.__all__ and getattr(quiver, name) is cls, name
        assert cls.__module__ == "quiver.errors" and (cls.__doc__ or "").strip(), name


def test_error_for_gives_the_exported_class_of_each_code():
    for code in ResponseCode:
        exc = errors.error_for(code, "why")
        assert isinstance(exc, errors.QuiverError) and exc.remark == "why"
        if type(exc) is not errors.QuiverError:
            assert exc.code == code and type(exc).__name__ in quiver.__all__


def test_the_package_ships_its_types():
    assert (Path(quiver.__file__).parent / "py.typed").is_file()
    source = Path(quiver.__file__).read_text()
    for name in ("Producer", "PullConsumer", "PushConsumer", "TransactionProducer", "Admin"):
        assert f"import {name}\n" in source.split("if TYPE_CHECKING:")[1], name   # seen by checkers
