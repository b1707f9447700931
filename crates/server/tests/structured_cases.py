"""The JSON-schema cases of openai_client.py's `structured` group: 20
(prompt, schema) pairs, from flat objects to nested objects, enums, arrays
and bounded numbers. Strings and arrays carry the bounds an application
would give them (maxLength, maxItems), so that a 135M model's answer ends
within the request's max_tokens."""

NAME = {"type": "string", "minLength": 1, "maxLength": 24}

CASES = [
    ("Describe a person named Alice who is 30.",
     {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 130}},
      "required": ["name", "age"], "additionalProperties": False}),
    ("Give the capital of France.",
     {"type": "object", "properties": {"country": NAME, "capital": NAME},
      "required": ["country", "capital"], "additionalProperties": False}),
    ("Is the sky blue? Answer with a boolean.",
     {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"],
      "additionalProperties": False}),
    ("Pick the color of grass.",
     {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"],
      "additionalProperties": False}),
    ("List three fruits.",
     {"type": "object", "properties": {"fruits": {"type": "array", "items": NAME, "minItems": 3, "maxItems": 3}},
      "required": ["fruits"], "additionalProperties": False}),
    ("Rate this movie from 1 to 5: it was great.",
     {"type": "object", "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 5}},
      "required": ["rating"], "additionalProperties": False}),
    ("What temperature is a warm day in Celsius?",
     {"type": "object", "properties": {"celsius": {"type": "number", "minimum": -50, "maximum": 60}},
      "required": ["celsius"], "additionalProperties": False}),
    ("Describe a book with its author.",
     {"type": "object", "properties": {
         "title": NAME,
         "author": {"type": "object", "properties": {"first": NAME, "last": NAME},
                    "required": ["first", "last"], "additionalProperties": False}},
      "required": ["title", "author"], "additionalProperties": False}),
    ("Give an address in Paris.",
     {"type": "object", "properties": {
         "city": {"const": "Paris"}, "street": NAME, "number": {"type": "integer", "minimum": 1, "maximum": 999}},
      "required": ["city", "street", "number"], "additionalProperties": False}),
    ("Classify the sentiment of: I love this!",
     {"type": "object", "properties": {
         "sentiment": {"enum": ["positive", "negative", "neutral"]},
         "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
      "required": ["sentiment", "confidence"], "additionalProperties": False}),
    ("List two people with their ages.",
     {"type": "object", "properties": {"people": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
         "type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
         "required": ["name", "age"], "additionalProperties": False}}},
      "required": ["people"], "additionalProperties": False}),
    ("Give a point on a plane.",
     {"type": "object", "properties": {"x": {"type": "integer", "minimum": -100, "maximum": 100},
                                       "y": {"type": "integer", "minimum": -100, "maximum": 100}},
      "required": ["x", "y"], "additionalProperties": False}),
    ("Which day comes after Monday?",
     {"type": "object", "properties": {"day": {"enum": ["Monday", "Tuesday", "Wednesday", "Thursday",
                                                        "Friday", "Saturday", "Sunday"]}},
      "required": ["day"], "additionalProperties": False}),
    ("Give three small prime numbers.",
     {"type": "object", "properties": {"primes": {"type": "array", "minItems": 3, "maxItems": 3,
                                                  "items": {"type": "integer", "minimum": 2, "maximum": 100}}},
      "required": ["primes"], "additionalProperties": False}),
    ("Describe a cat.",
     {"type": "object", "properties": {
         "name": NAME, "indoor": {"type": "boolean"}, "legs": {"type": "integer", "minimum": 0, "maximum": 4},
         "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}},
      "required": ["name", "indoor", "legs", "tags"], "additionalProperties": False}),
    ("Give a product with a price.",
     {"type": "object", "properties": {
         "product": NAME, "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000},
         "currency": {"enum": ["USD", "EUR", "GBP"]}},
      "required": ["product", "price", "currency"], "additionalProperties": False}),
    ("Answer yes or no: is water wet?",
     {"type": "string", "enum": ["yes", "no"]}),
    ("Make a tiny to-do list.",
     {"type": "object", "properties": {"todo": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
         "type": "object", "properties": {"task": NAME, "done": {"type": "boolean"}},
         "required": ["task", "done"], "additionalProperties": False}}},
      "required": ["todo"], "additionalProperties": False}),
    ("Describe a company and its CEO.",
     {"type": "object", "$defs": {"person": {"type": "object", "properties": {"name": NAME},
                                             "required": ["name"], "additionalProperties": False}},
      "properties": {"company": NAME, "ceo": {"$ref": "#/$defs/person"},
                     "founded": {"type": "integer", "minimum": 1800, "maximum": 2025}},
      "required": ["company", "ceo", "founded"], "additionalProperties": False}),
    ("Give a weather report.",
     {"type": "object", "properties": {
         "city": NAME,
         "today": {"type": "object", "properties": {
             "sky": {"enum": ["sunny", "cloudy", "rainy"]},
             "high": {"type": "integer", "minimum": -40, "maximum": 50},
             "low": {"type": "integer", "minimum": -40, "maximum": 50}},
             "required": ["sky", "high", "low"], "additionalProperties": False}},
      "required": ["city", "today"], "additionalProperties": False}),
]

assert len(CASES) == 20
