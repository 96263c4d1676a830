"""Text environments behind one protocol (`base.TextEnv`), built by exact name.

`make_env(name, **kwargs)` builds one environment; `load_tasks(name, split, **kwargs)` lists a family's tasks as
dicts (each with `task_id` and `task_type`). Heavy engines are imported inside their adapter only.
"""

from .base import EnvFailure, Step, TextEnv


ENV_NAMES = ("textrooms", "alfworld", "webshop", "search_qa", "scienceworld")


def make_env(name: str, **kwargs) -> TextEnv:
    """Build one environment of family `name`; `kwargs` are the adapter's constructor arguments."""
    if name == "textrooms":
        from .textrooms import TextRoomsEnv

        return TextRoomsEnv(**kwargs)
    elif name == "alfworld":
        from .alfworld import AlfworldEnv

        return AlfworldEnv(**kwargs)
    elif name == "webshop":
        from .webshop import WebShopEnv

        return WebShopEnv(**kwargs)
    elif name == "search_qa":
        from .search_qa import SearchQAEnv

        return SearchQAEnv(**kwargs)
    elif name == "scienceworld":
        from .scienceworld import ScienceWorldAdapter

        return ScienceWorldAdapter(**kwargs)
    raise ValueError(f"Unknown environment {name!r}; valid names: {', '.join(ENV_NAMES)}.")


def load_tasks(name: str, split: str, **kwargs) -> list[dict]:
    """The ordered task list of family `name` for `split` (a fixed panel: the same list every call)."""
    if name == "textrooms":
        from .textrooms import load_tasks as textrooms_tasks

        return textrooms_tasks(split, **kwargs)
    elif name == "alfworld":
        from .alfworld import load_tasks as alfworld_tasks

        return alfworld_tasks(split, **kwargs)
    elif name == "webshop":
        from .webshop import load_tasks as webshop_tasks

        return webshop_tasks(split, **kwargs)
    elif name == "search_qa":
        from .search_qa import load_tasks as search_qa_tasks

        return search_qa_tasks(split, **kwargs)
    elif name == "scienceworld":
        from .scienceworld import load_tasks as scienceworld_tasks

        return scienceworld_tasks(split, **kwargs)
    raise ValueError(f"Unknown environment {name!r}; valid names: {', '.join(ENV_NAMES)}.")


__all__ = ["ENV_NAMES", "EnvFailure", "Step", "TextEnv", "load_tasks", "make_env"]
