// Regex oracle of test_grammar_regex.c: ECMA-262 RegExp with the "u" flag,
// the dialect the JSON Schema specification names for `pattern`.
// Reads a JSON file [[pattern, [string, ...]], ...]; prints one JSON line
// per pattern: null when it is not a valid u-mode RegExp, else
// RegExp.test of each string.
const fs = require("fs");
for (const [pat, strings] of JSON.parse(fs.readFileSync(process.argv[2], "utf8"))) {
  let rx = null;
  try { rx = new RegExp(pat, "u"); } catch (e) { rx = null; }
  console.log(rx ? JSON.stringify(strings.map((s) => rx.test(s))) : "null");
}
