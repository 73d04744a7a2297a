"""The one error of the export readers."""


class ExportFileError(Exception):
    """The export file cannot be opened as the profile says (not a workbook, no such sheet); the message says
    why and names the file."""
