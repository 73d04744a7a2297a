"""Reading ERP exports, and the ISO 20022 messages in and out: an adapter layer that imports only `processor.domain`
of ours, and reaches no Kafka, store or bank (import-linter contracts in pyproject.toml).

- `profile`: an export profile (`[exports.NAME]`), parsed with pydantic, and the built-in `our_layout` (our own CSV
  layout, and a workbook in it); `numbers`: numbers as exports write them; `mapping`: rows of cells through a
  profile into our fields (pure, no I/O).
- `files`, `csv_rows`, `xlsx_rows`: the CSV and `.xlsx` file readers (`errors`: what they refuse).
- `layout`: the batch mapped rows become, and our JSON layout; `profiled`: an export through a profile (ours or an
  ERP's); `reading`: a file of any kind into a batch, as `dispersion submit` reads it.
- `checks`: the business checks of a read export, and of a `pain.001`, each problem named by its place.
- `iso20022`, `pain001`, `pain002`, `camt054`: ISO 20022 messages (docs/submit.md, docs/operations.md).
"""
