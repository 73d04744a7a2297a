"""dispersion processor: payroll batches to Open Banking file payments, and variable recurring payments."""
