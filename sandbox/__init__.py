"""Sandbox bank: a strict, runnable reading of the Payment Initiation Service spec.

It serves the authorization server (discovery, tokens, PAR, consent page) and the resource server
(file payments, VRP) at one base address. It imports nothing from the processor on purpose: two
independent readings of the spec catch each other's mistakes.
"""
