"""archpool: controlled architecture pools."""
