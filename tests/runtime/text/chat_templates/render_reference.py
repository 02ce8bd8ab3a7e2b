#!/usr/bin/env python3
"""Renders the chat-template corpus with Python's jinja2 the way Hugging Face transformers does
(apply_chat_template: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
the loopcontrols extension, a {% generation %} block, HF's tojson, raise_exception and
strftime_now) and prints one JSON document: every case's inputs and the reference output, for
tests/runtime/text/chat_template_parity_test.cpp to render again and compare byte for byte.

Usage: render_reference.py DIR            (DIR: this folder): the corpus
       render_reference.py DIR --render   renders the JSON list of cases on stdin
         ([{"template_file" | "template", "vars", "continue_final_message"?}]) and prints
         their outputs ([{"out"} | {"error", "raised"}]): the API test's reference
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1764590400  # strftime_now's fixed clock (2025-12-01 12:00 UTC), passed to the C++ side


class Generation(Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: no HTML escaping, keys in insertion order
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.fromtimestamp(NOW).strftime(fmt)


def continue_final_message(rendered, final_message):
    """transformers' apply_chat_template(continue_final_message=True) on the rendering."""
    if final_message.strip() not in rendered:
        raise ValueError("continue_final_message is set but the final message does not appear")
    loc = rendered.rindex(final_message.strip())
    if rendered[loc:loc + len(final_message.lstrip())] == final_message:
        return rendered[:loc + len(final_message.lstrip())]
    return rendered[:loc + len(final_message.strip())]


def plain(messages):
    """Only role and string content: what Strata's API passes to a template."""
    return all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}


def render(env, source, variables):
    try:
        if source not in _compiled:  # a template compiles once (as transformers caches it)
            _compiled[source] = env.from_string(source)
        return {"out": _compiled[source].render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises a bare TemplateError; jinja2's own errors are subclasses
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": str(e), "raised": raised}
    except Exception as e:  # TypeError, ZeroDivisionError... : a failed rendering either way
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def render_stdin(folder):
    env = environment()
    out = []
    for case in json.load(sys.stdin):
        if "template_file" in case:
            with open(os.path.join(folder, case["template_file"]), encoding="utf-8",
                      newline="") as f:
                source = f.read()
        else:
            source = case["template"]
        r = render(env, source, case["vars"])
        if "out" in r and case.get("continue_final_message"):
            r["out"] = continue_final_message(r["out"], case["vars"]["messages"][-1]["content"])
        out.append(r)
    json.dump(out, sys.stdout, ensure_ascii=True)


def main():
    folder = sys.argv[1]
    if sys.argv[2:] == ["--render"]:
        return render_stdin(folder)
    load = lambda name: json.load(open(os.path.join(folder, name), encoding="utf-8"))
    env = environment()
    cases = []
    manifest = load("templates.json")
    corpus = load("conversations.json")
    for name, tokens in manifest.items():
        if name.startswith("_"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8", newline="") as f:
            source = f.read()
        for conv in corpus["conversations"]:
            for agp in (True, False):
                # what transformers passes: messages, tools, documents, add_generation_prompt,
                # the special tokens, then the caller's kwargs
                variables = {"messages": conv["messages"],
                             "tools": corpus["tools"] if conv.get("tools") else None,
                             "documents": None, "add_generation_prompt": agp}
                variables.update(tokens)
                variables.update(conv.get("kwargs", {}))
                case = {"id": f"{name} / {conv['name']} / add_generation_prompt={agp}",
                        "template_file": name, "vars": variables}
                case.update(render(env, source, variables))
                cases.append(case)
            last = conv["messages"][-1]
            if plain(conv["messages"]) and last["role"] == "assistant":
                case = {"id": f"{name} / {conv['name']} / continue_final_message",
                        "template_file": name, "vars": dict(variables, add_generation_prompt=False),
                        "continue_final_message": True}
                case.update(render(env, source, case["vars"]))
                if "out" in case:
                    try:
                        case["out"] = continue_final_message(case["out"], last["content"])
                    except ValueError as e:
                        del case["out"]
                        case.update(error=str(e), raised=False)
                cases.append(case)
    features = load("features.json")
    for k, source in enumerate(features["templates"]):
        case = {"id": f"features.json #{k}: {source[:60]!r}", "template": source,
                "vars": features["vars"]}
        case.update(render(env, source, features["vars"]))
        cases.append(case)
    json.dump({"now": NOW, "jinja2": jinja2.__version__, "cases": cases}, sys.stdout,
              ensure_ascii=True)


if __name__ == "__main__":
    main()
