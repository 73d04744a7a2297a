"""The errors of the export readers."""


class ExportFileError(Exception):
    """The export file cannot be opened as the profile says (not a workbook, no such sheet); the message says
    why and names the file."""


class ExportLimitError(ExportFileError):
    """The file is past a limit of what is read (size, shared strings, rows) or holds what no export holds (a DTD,
    entities): refused before or while streaming, without reading the rest."""
