"""The Linear adapter: signatures, payload shapes, subjects, headlines.

Raw webhook dicts stop here: everything downstream sees typed envelopes.
"""
