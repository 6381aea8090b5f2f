#!/usr/bin/python3
"""Writes grammar_cases.json: JSON schemas of growing complexity, each with
instances (compact JSON, properties in schema order) that
grammar_bench.c tokenizes and replays token by token.  Every instance is
checked against its schema with python3-jsonschema here."""
import json, jsonschema

story = ("Once upon a time, in a quiet village by the sea, there lived a girl named Mia who "
         "loved to collect shells and tell stories to her little brother before bed.")
cases = []
def case(name, schema, *inst):
    for i in inst:
        jsonschema.validate(i, schema, cls=jsonschema.Draft202012Validator)
    cases.append({"name": name, "schema": schema, "instances": list(inst)})

case("int-array", {"type": "array", "items": {"type": "integer"}}, list(range(0, 400, 7)))
case("person", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"]}, {"name": "Mia " + story, "age": 31})
case("flags", {"type": "object", "properties": {
        "title": {"type": "string"}, "done": {"type": "boolean"}, "score": {"type": "number"},
        "mood": {"enum": ["happy", "sad", "sleepy", "curious"]}},
     "required": ["title", "done", "score", "mood"]},
     {"title": story, "done": False, "score": -12.75e3, "mood": "curious"})
case("array-of-objects", {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "text": {"type": "string"}}, "required": ["id", "text"]}},
     [{"id": i, "text": w} for i, w in enumerate(story.split())])
case("formats", {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}(-[a-z]+)?$"},
        "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"},
        "uid": {"type": "string", "format": "uuid"}, "note": {"type": "string", "maxLength": 200}},
     "required": ["code", "day", "at", "uid", "note"]},
     {"code": "AB-12345-beta", "day": "2024-02-29", "at": "2024-02-29T23:59:59.123+01:00",
      "uid": "123e4567-e89b-12d3-a456-426614174000", "note": story})
case("ranges", {"type": "object", "properties": {
        "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
        "temp": {"type": "integer", "minimum": -40, "maximum": 50},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 12},
                 "minItems": 1, "maxItems": 30}},
     "required": ["year", "temp", "tags"]},
     {"year": 2024, "temp": -17, "tags": [w.strip(",.") for w in story.split() if len(w.strip(",.")) >= 2]})
case("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {
            "name": {"type": "string"},
            "address": {"type": "object", "properties": {
                "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "city"]},
            "phone": {"type": "string"}},
            "required": ["name", "address"]},
        "history": {"type": "array", "items": {"type": "string"}}},
     "required": ["user", "history"]},
     {"user": {"name": "Mia", "address": {"street": "12 Shell Road", "city": "Seaside", "zip": "12345"}},
      "history": story.split(", ")})
case("anyof-defs", {"$defs": {
        "cat": {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}}, "required": ["kind", "lives"]},
        "dog": {"type": "object", "properties": {"kind": {"const": "dog"}, "tricks": {"type": "array", "items": {"type": "string"}}}, "required": ["kind", "tricks"]}},
     "type": "array", "items": {"anyOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}, {"type": "null"}]}},
     [{"kind": "cat", "lives": 9}, {"kind": "dog", "tricks": story.split()[:12]}, None, {"kind": "cat", "lives": 3}])
case("recursive-tree", {"$defs": {"node": {"type": "object", "properties": {
        "label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["label", "children"]}}, "$ref": "#/$defs/node"},
     {"label": "root", "children": [{"label": w, "children": [{"label": w.upper(), "children": []}]}
                                    for w in story.split()[:10]]})
props = {("field%02d" % i): ({"type": "integer"} if i % 3 == 0 else {"type": "string"} if i % 3 == 1 else {"type": "boolean"})
         for i in range(20)}
case("wide-object", {"type": "object", "properties": props, "required": list(props)[:10],
                     "additionalProperties": {"type": "string"}},
     dict([(k, (i * 37 if i % 3 == 0 else story[:40 + i] if i % 3 == 1 else bool(i % 2)))
           for i, k in enumerate(props)] + [("extra", story)]))
cases.append({"name": "any-json", "schema": None, "instances": [
    {"a": [1, 2.5, -3e10, True, None], "b": {"story": story, "words": story.split()[:20]},
     "c": [[[]], {}], "d": "\u00e9\u4e2d\U0001F600 \\ \" /"}]})
import os
json.dump(cases, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "grammar_cases.json"), "w"), indent=1, ensure_ascii=False)
print(len(cases), "cases")
