"""Publishing: model cards generated from the ExtensionRecord, and push to the Hub in one commit."""

from .card import model_card
from .push import push_to_hub

__all__ = ["model_card", "push_to_hub"]
